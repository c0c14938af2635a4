-- diloco.shard_faults: chaos on the syncer under `run` (lua/diloco/supervisor.lua), whether
-- it is one syncer or a set of shards with or without standbys (lua/diloco/shards.lua, the
-- set's methods): a fault of one shard (down, back from its checkpoint set), of one of its
-- processes (primary, standby, both), and pauses of either (docs/chaos.md, docs/shards.md).
local diloco = require "diloco"
local M = {}

-- A chaos syncer fault of shard k begins: the shard stops (its driver closed, nothing
-- saved), back `down` seconds later from the newest checkpoint set; the other shards and
-- the learners go on.  fault(fields) writes the fault event.  With standbys (role: of
-- which process): the primary killed, its standby takes over after its lease and the old
-- primary is back as the standby `down` later; the standby killed, a new one `down` later;
-- both (or a primary without a standby now), the shard back from its checkpoint set.
function M.fault_begin(ctx, k, down, now, fault, role)
  local set, d = ctx.syncer, down < math.huge and down or 0
  role = role or "primary"
  local f = { kind = "syncer", shard = set.S > 1 and k or nil, begin = true, duration = down < math.huge and down or nil,
    role = set.standbys and role or nil }
  ctx.standby_back_at = ctx.standby_back_at or {}
  if set.standbys and (role == "standby" or (role == "primary" and set:has_standby(k))) then
    if role == "standby" then set:kill_standby(k) else set:kill_primary(k) end
    ctx.standby_back_at[k] = { at = now + d, role = role }
    fault(f)
    return
  end
  if set.standbys then set:kill_standby(k) end
  if not set:is_down(k) then set:down(k) end
  ctx.shard_back_at, ctx.shard_role = ctx.shard_back_at or {}, ctx.shard_role or {}
  ctx.shard_back_at[k], ctx.shard_role[k] = now + d, f.role
  fault(f)
end

-- A standby of the run's process took over (islands.standbys): counted, and the run's epoch
-- record moves on to its epoch (a shard restored later stamps a newer one).
function M.took_over(ctx, ev)
  ctx.takeovers = (ctx.takeovers or 0) + 1
  local f = io.open(ctx.srd.out .. "/epoch", "r")
  local last = f and math.tointeger(tonumber(f:read("l") or "")) or 0
  if f then f:close() end
  if ev.epoch > last then ctx.srd:write_file("epoch", tostring(ev.epoch) .. "\n") end
end

-- Standbys due back by now (fault_begin): started as the standby of the shard's primary
-- (once one serves it: a killed primary's standby takes over first), and the fault's end.
function M.standby_ends(ctx, now, fault)
  local set = ctx.syncer
  for k, b in pairs(ctx.standby_back_at or {}) do
    if now >= b.at and set.list[k] and not set:has_standby(k) then
      ctx.standby_back_at[k] = nil
      local ok, err = set:start_standby(k)
      if not ok then error({ diloco_error = "syncer: " .. tostring(err), code = 1 }, 0) end
      if b.role then fault { kind = "syncer", shard = set.S > 1 and k or nil, role = b.role, begin = false } end
    end
  end
end

-- The shards whose outage ended by now come back from the newest set (its file of
-- theirs), each stamping the next epoch of the run's record; the merges each made after
-- that set are lost (taken off the run's count).
function M.fault_ends(ctx, now, fault)
  for k, at in pairs(ctx.shard_back_at or {}) do
    if now >= at then
      ctx.shard_back_at[k] = nil
      local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
      local last = list[#list]
      local meta = last and diloco.safetensors_meta(last.path)
      local saved, saved_useful = {}, {}
      for n in ((type(meta) == "table" and meta["diloco.shard_merges"] or "") .. ","):gmatch("(%d*),") do
        saved[#saved + 1] = tonumber(n) or 0
      end
      for n in ((type(meta) == "table" and meta["diloco.shard_useful"] or "") .. ","):gmatch("([^,]*),") do
        saved_useful[#saved_useful + 1] = tonumber(n) or 0
      end
      local t0 = diloco.clock()
      local listens = {}
      for a in (ctx.address .. ","):gmatch("([^,]*),") do listens[#listens + 1] = a end
      local ok, err = ctx.syncer:up(k, last and last.path or nil, listens[k], ctx.host.next_epoch(ctx, last and last.path))
      if not ok then error({ diloco_error = "syncer: " .. tostring(err), code = 1 }, 0) end
      if ctx.syncer.standbys then -- a standby of it again, at once
        ctx.standby_back_at = ctx.standby_back_at or {}
        ctx.standby_back_at[k] = { at = now }
      end
      local lost = math.max(0, ctx.syncer.merges[k] - (saved[k] or 0))
      ctx.syncer.merges[k] = saved[k] or 0
      ctx.gm = ctx.gm - lost
      -- the useful tokens of the lost merges leave the account (goodput counts merges that stand)
      local lost_useful = math.max(0, ctx.syncer.useful[k] - (saved_useful[k] or 0))
      ctx.syncer.useful[k] = saved_useful[k] or 0
      ctx.account:set_useful_tokens(math.max(0, ctx.account:useful_tokens() - lost_useful))
      ctx.merges_lost = (ctx.merges_lost or 0) + lost
      ctx.syncer_restarts = (ctx.syncer_restarts or 0) + 1
      fault { kind = "syncer", shard = ctx.syncer.S > 1 and k or nil, begin = false, epoch = ctx.syncer:epochs()[k],
        merges_lost = lost, role = ctx.shard_role and ctx.shard_role[k] or nil,
        from = last and last.path or nil, load_s = diloco.clock() - t0, fresh = not last or nil }
    end
  end
end

-- ---- pauses of the syncer under `run` (chaos kind pause naming no learner) ----

-- Shard k of the run's syncer (a set, or the one syncer for k = 1) is stopped where it is
-- for `down` seconds (Syncer:pause: as SIGSTOP stops a process), by role with standbys: the
-- primary (its standby takes over if the pause outlasts the transport's timeout and the
-- lease; the stopped one, holding its address, is ended when its pause ends and a new
-- standby starts there, as a killed primary comes back; one stopped for good keeps it),
-- the standby (its primary lets it go after the timeout and it attaches anew when it goes
-- on), or both.  A shard down (a syncer fault) has nothing to stop.
function M.pause_begin(ctx, k, down, now, fault, role)
  local set = ctx.syncer
  local sharded = type(set) == "table"
  role = role or "primary"
  local procs = {}
  if not sharded then procs[1] = set
  else
    if role ~= "standby" and set.list[k] then procs[#procs + 1] = set.list[k] end
    if role ~= "primary" and set.sb[k] then procs[#procs + 1] = set.sb[k] end
  end
  for _, s in ipairs(procs) do s:pause(down) end
  if sharded and role == "primary" and set:has_standby(k) and down < math.huge then
    ctx.standby_back_at = ctx.standby_back_at or {} -- (standby_ends: once a standby took over)
    ctx.standby_back_at[k] = { at = now + down }
  end
  ctx.syncer_paused = ctx.syncer_paused or {}
  ctx.syncer_paused[k] = { untl = now + down, role = sharded and set.standbys and role or nil }
  fault { kind = "pause", shard = sharded and set.S > 1 and k or nil, role = ctx.syncer_paused[k].role, begin = true,
    duration = down < math.huge and down or nil, skipped = #procs == 0 and "the shard is down" or nil }
end

-- The pauses that ended by now: a primary its standby took over from meanwhile is ended (a
-- new standby then starts at its address: M.standby_ends); the fault's end says so.
function M.pause_ends(ctx, now, fault)
  local set = ctx.syncer
  for k, p in pairs(ctx.syncer_paused or {}) do
    if now >= p.untl then
      ctx.syncer_paused[k] = nil
      local taken = type(set) == "table" and set.zombie[k]
      if taken then
        set.zombie[k] = nil
        taken:kill()
      end
      fault { kind = "pause", shard = type(set) == "table" and set.S > 1 and k or nil, role = p.role, begin = false,
        taken_over = taken and true or nil }
    end
  end
end

return M
