-- diloco.supervisor: the learner processes of `diloco-lua run` (islands.count > 1): their
-- start (each a fresh diloco-lua learner, exec'd; an island of several ranks one mpirun job),
-- their watch (done, crashed and restarted with backoff, held while another is down in a
-- non-elastic run, rolled back together in non-elastic data parallel), their signals, and
-- the recipe's fault schedule executed on them (read through core/chaos.h's cursor, as sim
-- reads it).  It works on the run context of lua/diloco/cluster.lua (runctx); what it
-- needs of the syncer it asks through ctx.host (start_syncer, save_syncer, restore_counts,
-- link_of).  docs/runtime.md.
local diloco = require "diloco"
local train = require "diloco.train"
local islands = require "diloco.islands"
local rc = require "diloco.runctx"
local write, median, elapsed, island, say, run_step, fault = rc.write, rc.median, rc.elapsed, rc.island, rc.say,
  rc.run_step, rc.fault
local M = {}

local fail = train.fail

-- Limits of the supervisor: every wait has a deadline (the recipe's runtime section
-- sets the join deadline, the drain and the restart budget).
M.STOP_TIMEOUT = 60       -- s: learners asked to stop must be gone within this, else KILL
M.SLOW_PERIOD = 0.5       -- s: a chaos slow event runs its learner 1/factor of each period
M.RESTART_MIN = 1         -- s: the first restart of a crashed learner waits this,
M.RESTART_MAX = 30        -- s:   doubled per crash in a row, up to this

-- runtime.elastic = false (non-elastic data parallel, the baseline of the chaos
-- benchmark): while any learner is lost, every other one is stopped (SIGSTOP), and all
-- go on together once it is back.
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

local function hold_others(ctx)
  if ctx.rt.elastic or not ctx.supervising or ctx.job_rollbacks then return end
  local anyone_lost = false
  for _, L in ipairs(ctx.learners) do
    anyone_lost = anyone_lost or (L.lost and L.state ~= "done") or L.state == "down"
  end
  for m, L in ipairs(ctx.learners) do
    local hold = anyone_lost and not L.lost and L.state == "running"
    if L.pid and hold ~= (L.held or false) then
      signal_learner(ctx, m, hold and "STOP" or "CONT")
      L.held = hold
      island(ctx, m, hold and "held" or "up")
      fault(ctx, { kind = "held", learner = m, begin = hold })
    end
  end
end

-- runtime.elastic = false in data parallel: a failure rolls every learner back (below).
local begin_rollback

-- ---- the learner processes (run) ----

local function learner_argv(ctx, m, fresh, rollback)
  local o = ctx.opts
  local argv = { diloco.proc.self_exe(), "learner", o.recipe_path, "--connect", ctx.address, "--id", tostring(m),
    "--out", string.format("%s/learner-%d", ctx.out, m), "--secret-file", ctx.secret_file, "--run-id", ctx.run_id,
    "--quiet" }
  if fresh then argv[#argv + 1] = "--overwrite" end -- a new run: nothing of an earlier one is continued
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

local function spawn(ctx, m, fresh, rollback)
  local L = ctx.learners[m]
  local dir = string.format("%s/learner-%d", ctx.out, m)
  diloco.mkdir_p(dir)
  if fresh then -- a new run: the display must not read an earlier run's progress
    os.remove(dir .. "/metrics.jsonl")
    if L.tail then L.tail:close() end
    L.tail, L.progress = nil, nil
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
    argv.parent_death = "KILL"
  end
  argv.stdout, argv.stderr = dir .. "/log", dir .. "/log"
  local pid, err = diloco.proc.spawn(argv)
  if not pid then fail("starting learner %d: %s", m, err) end
  L.pid, L.state, L.started = pid, "running", elapsed(ctx)
  island(ctx, m, "up")
  L.restart_at, L.bye, L.joined = nil, false, false
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

-- Reaps the learners that ended: done, killed by chaos, crashed (restart with backoff).
local function reap(ctx)
  for m, L in ipairs(ctx.learners) do
    if L.pid then
      local st = diloco.proc.wait(L.pid)
      if st then
        L.pid = nil
        local now = elapsed(ctx)
        island(ctx, m, "off") -- (gone: down or done below, else no measure covers it)
        if L.stop_expected then -- killed because a non-elastic run cannot go on
          L.state = "stopped"
        elseif L.chaos_kill and ctx.stopping then -- killed by chaos or a rollback, reaped after a stop
          L.chaos_kill = nil
          L.state = "stopped"
        elseif L.chaos_kill then -- chaos (or a rollback) took it: back after its down time
          L.chaos_kill = nil
          L.state = "down"
          island(ctx, m, "down")
        elseif st.exited == 0 then
          L.state = "done"
          island(ctx, m, "done")
        elseif ctx.stopping then
          L.state = "stopped"
        else
          L.crashes = L.crashes + 1
          local why = st.exited and string.format("exit status %d", st.exited)
            or string.format("signal %s", st.name or tostring(st.signal))
          local tail = log_tail(ctx, m)
          if st.exited == 2 or L.crashes > ctx.rt.restarts then -- a usage error repeats: do not restart it
            L.state = "failed"
            fault(ctx, { kind = "crash", learner = m, text = why .. ": " .. tail, restart = false })
            if ctx.job_rollbacks then -- non-elastic: without it nobody can go on
              for j, O in ipairs(ctx.learners) do
                if O.pid then
                  signal_learner(ctx, j, "KILL")
                  O.chaos_kill = nil
                end
                if O.state ~= "failed" then O.stop_expected = true end
                if not O.pid and O.state ~= "failed" then O.state = "stopped" end
              end
              ctx.rolling = nil
              ctx.failed_learner = string.format("learner %d failed for good (%s): a non-elastic run cannot go on "
                .. "without it", m, why)
            end
            say(ctx, "learner %d failed (%s): %s", m, why, tail)
          else
            local wait = math.min(M.RESTART_MAX, M.RESTART_MIN * 2 ^ (L.crashes - 1))
            L.state, L.restart_at, L.down_cause = "down", now + wait, "crash"
            island(ctx, m, "down")
            if ctx.job_rollbacks then begin_rollback(ctx, m, "crash", now + wait) end
            fault(ctx, { kind = "crash", learner = m, text = why .. ": " .. tail, restart_in = wait })
            say(ctx, "learner %d crashed (%s), restarting in %g s: %s", m, why, wait, tail)
          end
        end
      end
    end
  end
end

local function restart_due(ctx)
  local now = elapsed(ctx)
  -- the run is over once every learner that is not down has finished: one still down is
  -- not restarted to train on alone (sim's run ends at its horizon too)
  if not ctx.rolling then
    local finished, up = false, false
    for _, L in ipairs(ctx.learners) do
      if L.state == "done" then finished = true
      elseif L.state ~= "down" and L.state ~= "failed" and L.state ~= "stopped" then up = true end
    end
    if finished and not up then
      for m, L in ipairs(ctx.learners) do
        if L.state == "down" then
          L.state = "done"
          fault(ctx, { kind = "restart", learner = m, skipped = "the others finished: the run is over" })
        end
      end
    end
  end
  for m, L in ipairs(ctx.learners) do
    if L.state == "down" and L.restart_at and now >= L.restart_at and not ctx.stopping and not ctx.rolling then
      spawn(ctx, m)
      L.restarted_at, L.rejoined, L.recovered = now, false, false
      ctx.restarts = ctx.restarts + 1
      fault(ctx, { kind = L.down_cause or "kill", learner = m, begin = false })
    end
  end
end

-- ---- non-elastic data parallel: rollback ----
--
-- A failure (a kill, a crash, a learner lost by timeout) stops the job: every learner is
-- killed, and once the failed one's down time is over all start again from the newest
-- checkpoint every one of them holds (checkpoint.every), model and optimizer included
-- (learner --restart-at STEP); the steps past it are lost work, taken out of the goodput.
-- The syncer starts again from a checkpoint of its own (a new epoch: nothing the killed
-- processes sent is merged; the first gradient, for STEP + 1, sets its round).

begin_rollback = function(ctx, m, cause, back_at)
  local now = elapsed(ctx)
  -- stopping (a signal): no rollback begins; the losses of the learners a rollback or the
  -- stop killed arrive after it and are not failures to roll back from
  if ctx.stopping then return end
  if ctx.rolling then -- another failure meanwhile: all wait for the later one
    ctx.rolling.back_at = math.max(ctx.rolling.back_at, back_at)
    -- and it too is restarted by rollback_due with the others, never alone: a learner
    -- restarted alone would keep the rollback waiting for its process for ever
    if ctx.learners[m] then ctx.learners[m].restart_at = nil end
    return
  end
  ctx.rolling = { since = now, learner = m, cause = cause, back_at = back_at }
  ctx.job_rollbacks = ctx.job_rollbacks + 1
  for j, L in ipairs(ctx.learners) do
    if L.pid then
      L.chaos_kill = true -- reaped as down, not as a crash
      signal_learner(ctx, j, "KILL")
    end
    if L.state == "done" then L.state = "down" end
    L.slow, L.restart_at = nil, nil -- restarted by rollback_due, all together
    island(ctx, j, "down")
    if j ~= m or not L.down_cause or L.down_cause == "rollback" then L.down_cause = j == m and cause or "rollback" end
  end
  fault(ctx, { kind = "job_rollback", learner = m, begin = true, cause = cause, back_in = math.max(0, back_at - now) })
end

local function rollback_due(ctx)
  local rb = ctx.rolling
  if not rb or ctx.stopping or elapsed(ctx) < rb.back_at then return end
  for _, L in ipairs(ctx.learners) do
    if L.pid then return end -- not every process reaped yet
  end
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
  local now = elapsed(ctx)
  for m, L in ipairs(ctx.learners) do
    L.rolled_back_steps = (L.rolled_back_steps or 0) + lost_steps
    spawn(ctx, m, false, K)
    L.restarted_at, L.rejoined, L.recovered = now, false, false
    ctx.restarts = ctx.restarts + 1
  end
  ctx.rolling = nil
  fault(ctx, { kind = "job_rollback", learner = rb.learner, begin = false, cause = rb.cause, step = K,
    rolled_back_steps = lost_steps, rolled_back_tokens = lost_tokens, latency = now - rb.since,
    syncer_s = diloco.clock() - t0, epoch = ctx.syncer:epoch() })
end

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

-- A slow fault of learner m began or ended at t: its step time is now the product of the
-- factors of those under way (chaos.h); none left, it runs at full speed again.
local function slow_changed(ctx, m, L, t)
  local factor = ctx.chaos:slow_factor(m, t)
  if not L.pid then return end
  if L.slow and factor == 1 then
    L.slow.untl = elapsed(ctx) -- (the duty cycle lets it run, then forgets it)
  elseif L.slow then
    L.slow.factor = factor
  elseif factor ~= 1 then
    -- slowed by a factor: it runs 1/factor of each SLOW_PERIOD (SIGCONT), stopped the rest
    L.slow = { factor = factor, t0 = elapsed(ctx), untl = math.huge, running = true }
  end
end

local function chaos_due(ctx)
  if not ctx.chaos then return end
  while not ctx.stopping do
    local e = ctx.chaos:due(elapsed(ctx) - (ctx.chaos_t0 or 0))
    if not e then break end
    local L = e.learner and ctx.learners[e.learner]
    local down = e.duration or math.huge
    e.rank = e.learner and e.kind == "kill" and ctx.chaos_ranks[e.learner .. "@" .. e.at] or nil
    if not e.begin then
      -- the ends of kills, pauses, cuts, links and syncer outages are the timers their
      -- begins set (their merged durations); a slow's end changes the product
      if e.kind == "slow" and L then
        slow_changed(ctx, e.learner, L, e.t)
        if L.pid then fault(ctx, { kind = "slow", learner = e.learner, begin = false }) end
      end
    elseif e.kind == "kill" and L and L.pid then
      L.chaos_kill = true
      L.restart_at, L.down_cause = elapsed(ctx) + down, "kill"
      island(ctx, e.learner, "down")
      local pid = e.rank and L.ranks and rank_pid(ctx, e.learner, e.rank)
      -- one rank of an island: its mpirun ends the job, the island is down as a whole
      if not (pid and diloco.proc.signal_grandchild(L.pid, pid, "KILL")) then signal_learner(ctx, e.learner, "KILL") end
      if L.held then L.held = false end
      fault(ctx, { kind = "kill", learner = e.learner, rank = e.rank, begin = true,
        duration = down < math.huge and down or nil })
      if ctx.job_rollbacks then begin_rollback(ctx, e.learner, "kill", elapsed(ctx) + down) end
    elseif e.kind == "pause" and L and L.pid then
      signal_learner(ctx, e.learner, "STOP")
      L.state, L.resume_at = "paused", elapsed(ctx) + down
      island(ctx, e.learner, "paused")
      fault(ctx, { kind = "pause", learner = e.learner, begin = true, duration = down < math.huge and down or nil })
    elseif e.kind == "slow" and L and L.pid then
      slow_changed(ctx, e.learner, L, e.t)
      fault(ctx, { kind = "slow", learner = e.learner, begin = true, factor = e.factor,
        duration = down < math.huge and down or nil })
    elseif e.kind == "syncer" and ctx.syncer then
      -- the syncer dies (nothing saved at its end) and comes back from its newest checkpoint
      local st = ctx.syncer:stats()
      ctx.bytes_prev_in = (ctx.bytes_prev_in or 0) + st.bytes_in
      ctx.bytes_prev_out = (ctx.bytes_prev_out or 0) + st.bytes_out
      ctx.syncer:close()
      ctx.syncer = nil
      ctx.syncer_back_at = elapsed(ctx) + (down < math.huge and down or 0)
      fault(ctx, { kind = "syncer", begin = true, duration = down < math.huge and down or nil,
        merges_lost = ctx.gm - ctx.merges_saved })
    elseif e.kind == "cut" then
      -- the link stalls both ways (the syncer's side of it); the learner, alive or not, is
      -- held off until it ends (the syncer times it out meanwhile, and it rejoins after)
      ctx.cuts = ctx.cuts or {}
      ctx.cuts[e.learner] = elapsed(ctx) + down
      if ctx.syncer then ctx.syncer:cut(e.learner, down) end
      if L then L.cut_ended, L.cut_recovered = nil, nil end
      fault(ctx, { kind = "cut", learner = e.learner, begin = true, duration = down < math.huge and down or nil })
    elseif e.kind == "link" then
      ctx.link_events = ctx.link_events or {}
      local list = ctx.link_events[e.learner] or {}
      ctx.link_events[e.learner] = list
      list[#list + 1] = { bandwidth = e.bandwidth, latency = e.latency, untl = elapsed(ctx) + down }
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
  for m, L in ipairs(ctx.learners) do
    local sl = L.slow
    if sl and L.pid and L.state ~= "paused" then
      local now = elapsed(ctx)
      local run = now >= sl.untl or ((now - sl.t0) % M.SLOW_PERIOD) < M.SLOW_PERIOD / sl.factor
      if run ~= sl.running then
        signal_learner(ctx, m, run and "CONT" or "STOP")
        sl.running = run
      end
      if now >= sl.untl then L.slow = nil end -- (its end's fault event: chaos_due)
    elseif sl and not L.pid then
      L.slow = nil -- it died meanwhile
    end
    if L.state == "paused" and elapsed(ctx) >= L.resume_at and L.pid then
      signal_learner(ctx, m, "CONT")
      L.state = "running"
      island(ctx, m, L.held and "held" or "up")
      fault(ctx, { kind = "pause", learner = m, begin = false })
    end
  end
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


M.signal_learner, M.hold_others, M.begin_rollback, M.spawn, M.log_tail, M.reap, M.restart_due, M.rollback_due =
  signal_learner, hold_others, begin_rollback, spawn, log_tail, reap, restart_due, rollback_due
M.chaos_schedule, M.chaos_due = chaos_schedule, chaos_due

return M
