-- diloco.shards: a syncer in shards (docs/shards.md).
--
-- Under a launcher (`syncer --shard I/S`, one process per shard) each shard saves a model
-- that holds the global values of its own fragments only; shard 1 then waits for the
-- run's other shards (OUT/shard-K beside its own OUT/shard-1, on one file system) to end,
-- and assembles the run's global model from each shard's fragments, which it evaluates
-- and saves as OUT/model.safetensors (M.assemble).
--
-- Under `run` (islands.syncers = S) the shards live in the run's process behind one
-- syncer's methods (M.start, below).
local diloco = require "diloco"
local M = {}

-- The summary line of the metrics at path, nil while there is none (a shard not ended).
local function summary_of(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local last
  for line in f:lines() do
    if line:find('"event":"summary"', 1, true) then last = line end
  end
  f:close()
  if not last then return nil end
  local ok, ev = pcall(diloco.json_decode, last)
  return ok and ev or nil
end

-- The directory of shard k of the run whose shard directory is `out` (".../shard-I").
function M.dir(out, k)
  local root = out:match("^(.*)/shard%-%d+$") or out:match("^(.*)/shard%-%d+%-standby%d*$") or out
  return string.format("%s/shard-%d", root, k), root
end

-- Shard k's summary and directory: its primary's (OUT/shard-K), or that of a standby that
-- took over (OUT/shard-K-standby, -standby2, ...: docs/shards.md, "Standbys"); nil while
-- none has one.
local function shard_summary(dir)
  local sum = summary_of(dir .. "/metrics.jsonl")
  if sum then return sum, dir end
  for n = 1, 16 do
    local sdir = dir .. "-standby" .. (n > 1 and tostring(n) or "")
    sum = summary_of(sdir .. "/metrics.jsonl")
    if sum and sum.took_over_s then return sum, sdir end
  end
  return nil
end

-- Puts the other shards' fragments into ctx.params, which holds this shard's (the global
-- model of its own fragments).  Waits up to wait_s for each shard's summary (kept in
-- ctx.shard_summaries: merges, rejects, epoch, bytes, goodput, error of each).  Returns
-- the run's directory, and the list of what could not be taken ("shard 2: ... ") or nil.
function M.assemble(ctx, wait_s, stopped)
  local S, I = ctx.opts.shards, ctx.opts.shard
  local owner = ctx.plan:deal(S)
  local _, root = M.dir(ctx.out, I)
  local problems = {}
  ctx.shard_summaries = {} -- the other shards' summaries, for shard 1's (runend.lua)
  ctx.shard_per_learner = {} -- ... and their per-learner rows (merged, bytes), for the run's
  local deadline = diloco.clock() + wait_s
  for k = 1, S do
    if k ~= I then
      local dir = M.dir(ctx.out, k)
      local sum, sdir = shard_summary(dir)
      while not sum and diloco.clock() < deadline and not (stopped and stopped()) do
        diloco.proc.sleep(0.1)
        sum, sdir = shard_summary(dir)
      end
      dir = sdir or dir
      local t = sum and sum.run_id == ctx.run_id and diloco.load_safetensors(dir .. "/model.safetensors")
      if sum then
        ctx.shard_summaries[#ctx.shard_summaries + 1] = { shard = k, merges = sum.merges, rejects = sum.rejects,
          epoch = sum.epoch, bytes_up = sum.bytes_up, bytes_down = sum.bytes_down, goodput = sum.goodput,
          useful_tokens = sum.useful_tokens, merges_lost = sum.merges_lost, error = sum.error }
        ctx.shard_per_learner[#ctx.shard_per_learner + 1] = type(sum.per_learner) == "table" and sum.per_learner or {}
      end
      if not sum then
        problems[#problems + 1] = string.format("shard %d: no summary in %s/metrics.jsonl within %g s", k, dir, wait_s)
      elseif sum.run_id ~= ctx.run_id then
        problems[#problems + 1] = string.format("shard %d: %s is run %s, this is run %s", k, dir, tostring(sum.run_id),
          ctx.run_id)
      elseif not t then
        problems[#problems + 1] = string.format("shard %d: no model in %s", k, dir)
      else
        local list = {}
        for i, p in ipairs(ctx.plist) do
          local src = t[p[1]]
          if not src or src.numel ~= p[2].numel then
            problems[#problems + 1] = string.format("shard %d: its model lacks tensor %s or its shape differs", k, p[1])
            list = nil
            break
          end
          list[i] = { p[1], src }
        end
        if list then -- laid out as ctx.params (same tensors, same order): the views index both
          local other = diloco.Params(list)
          local from, to = other:flat(), ctx.params:flat()
          for f = 1, #ctx.plan do
            if owner[f] == k then
              for _, v in ipairs(ctx.plan:views(f)) do
                to:slice(1, v.offset + 1, v.offset + v.numel):copy(from:slice(1, v.offset + 1, v.offset + v.numel))
              end
            end
          end
          other:close()
        end
      end
    end
  end
  return root, #problems > 0 and problems or nil
end

-- The run's totals under a launcher, in shard 1's summary (`run`): its own summary's counts
-- and those of the other shards it assembled from (ctx.shard_summaries), added up (the
-- run's goodput is those useful tokens over the capacity shard 1's account measured:
-- runend.lua), and per learner its merged contributions and bytes each way over every shard
-- (others_per: the other shards' per_learner rows).  `shards`: how many summaries are in
-- it (fewer than S: a shard that left none).
function M.run_totals(own, others, others_per)
  local run = { shards = 1, per_learner = {} }
  local keys = { "merges", "rejects", "merges_lost", "bytes_up", "bytes_down", "useful_tokens" }
  for _, key in ipairs(keys) do run[key] = tonumber(own[key]) or 0 end
  for _, sum in ipairs(others) do
    run.shards = run.shards + 1
    for _, key in ipairs(keys) do run[key] = run[key] + (tonumber(sum[key]) or 0) end
  end
  local lkeys = { "merged", "bytes_up", "bytes_down" }
  for m, row in ipairs(own.per_learner or {}) do
    local t = {}
    for _, key in ipairs(lkeys) do t[key] = tonumber(row[key]) or 0 end
    for _, rows in ipairs(others_per or {}) do
      for _, key in ipairs(lkeys) do t[key] = t[key] + (tonumber((rows[m] or {})[key]) or 0) end
    end
    run.per_learner[m] = t
  end
  return run
end

-- Shard 1 under a launcher, once its summary is written: the run's tape in the run's root
-- (OUT/metrics.jsonl, what plot, compare and timeline read of one run): every shard's
-- merge and fault events in time order, each with its `shard` (a shard whose standby
-- took over: the standby's tape, which holds every version), then the run's summary:
-- shard 1's with the shards' totals (`run`) as its counts.  true, or nil and the message.
function M.write_run_tape(ctx, root, summary)
  local events = {}
  for k = 1, ctx.opts.shards do
    local dir = M.dir(ctx.out, k)
    local _, sdir = shard_summary(dir)
    local f = io.open((sdir or dir) .. "/metrics.jsonl", "r")
    for line in f and f:lines() or function() end do
      local ok, ev = pcall(diloco.json_decode, line)
      if ok and type(ev) == "table" and (ev.event == "merge" or ev.event == "fault") and type(ev.time) == "number" then
        ev.shard = ev.shard or k
        events[#events + 1] = ev
      end
    end
    if f then f:close() end
  end
  for i, ev in ipairs(events) do ev.order_ = i end -- (ties keep each shard's own order)
  table.sort(events, function(a, b) return a.time < b.time or (a.time == b.time and a.order_ < b.order_) end)
  local metrics = require("diloco.metrics")
  local w, err = metrics.open(root .. "/metrics.jsonl")
  if not w then return nil, err end
  for _, ev in ipairs(events) do
    ev.order_ = nil
    local ok, werr = w:raw(metrics.line(ev.event, ev, ev.time) .. "\n")
    if not ok then return nil, werr end
  end
  -- the run's summary: shard 1's, its counts the run's (each shard's own stays in its dir)
  local s = {}
  for key, v in pairs(summary) do s[key] = v end
  for key, v in pairs(summary.run or {}) do if key ~= "shards" and key ~= "per_learner" then s[key] = v end end
  if summary.run and type(summary.per_learner) == "table" then -- each learner's row, its counts over every shard
    s.per_learner = {}
    for m, row in ipairs(summary.per_learner) do
      local r = {}
      for key, v in pairs(row) do r[key] = v end
      for key, v in pairs(summary.run.per_learner[m] or {}) do r[key] = v end
      s.per_learner[m] = r
    end
  end
  s.shard, s.shards = nil, ctx.opts.shards
  local ok, werr = w:raw(metrics.line("summary", s, diloco.wall_time()) .. "\n")
  w:close()
  return ok, werr
end

-- ---- the shards of one process: a syncer in S shards behind one syncer's methods ----
--
-- `run` (and `syncer` without --shard) with islands.syncers = S serves S shards, each a
-- diloco.Syncer of its own (its thread, port, epoch and checkpoint), behind the methods the
-- run's host calls on one syncer: events from every shard (each tagged `shard`), the
-- global model from every shard's fragments, one checkpoint set (shard 1's file, the
-- others beside it: M.side_path), the learners' and the run's counters added up.

local Set = {}
Set.__index = Set

-- Shard k's checkpoint beside shard 1's at path (k = 1: path itself).
function M.side_path(path, k)
  if k == 1 then return path end
  return (path:gsub("%.safetensors$", "")) .. string.format(".shard-%d.safetensors", k)
end

-- "HOST:PORT" with the port moved on by k - 1 when it is not 0 (shard k of a fixed port).
local function nth(addr, k)
  local host, port = addr:match("^(.*):(%d+)$")
  port = port and math.tointeger(tonumber(port))
  if not port or port == 0 or k == 1 then return addr end
  return string.format("%s:%d", host, port + k - 1)
end

-- The address learners reach each of the shards (bound to ports) at, joined by commas
-- (the address file's, `run`'s --connect): diloco.advertise_address of each, a fixed
-- port in listen or advertise moved on by k - 1 for shard k.  One port: one syncer.
-- With standbys (sports: each shard's standby port), each shard's item is its primary's
-- address and its standby's joined by `|` (alternates a learner tries in turn).
function M.addresses(listen, ports, advertise, sports)
  local out = {}
  for k, port in ipairs(ports) do
    out[k] = diloco.advertise_address(nth(listen, k), port, advertise and nth(advertise, k) or nil)
    if sports and sports[k] then
      local host = advertise and advertise:match("^(.*):%d+$")
      out[k] = out[k] .. "|" .. diloco.advertise_address(nth(listen, k), sports[k],
        host and string.format("%s:%d", host, sports[k]) or nil)
    end
  end
  return table.concat(out, ",")
end

-- The host part of "HOST:PORT" with another port.
local function with_port(addr, port) return string.format("%s:%d", addr:match("^(.*):%d+$") or addr, port) end

-- Starts S shards with diloco.Syncer options o (listen: one address per shard joined by
-- commas, or one address whose port is 0 for every shard; resume: shard 1's checkpoint,
-- the others' beside it), each with a standby when standbys (islands.standbys).  Returns
-- the set, or nil and the first error.
function M.start(o, S, standbys)
  local listens = {}
  for a in (o.listen .. ","):gmatch("([^,]*),") do listens[#listens + 1] = a:match("^[^|]*") end -- (a standby's after |)
  local set = setmetatable({ list = {}, S = S, turn = 1, opts = o, merges = {}, useful = {}, epoch_of = {},
    standbys = standbys or nil, sb = {}, slot = {}, pslot = {}, reported = {}, reported_by = {}, pending = {},
    killed = {}, rbuf = {}, zombie = {} }, Set)
  for k = 1, S do
    local ok = {}
    for key, v in pairs(o) do ok[key] = v end
    ok.shard, ok.shards = S > 1 and k or nil, S > 1 and S or nil -- (one syncer in a set: standbys)
    ok.listen = listens[k] or nth(listens[1], k) -- (one address: a fixed port moved on per shard)
    ok.resume = o.resume and M.side_path(o.resume, k) or nil
    local s, err = diloco.Syncer(ok)
    if not s then
      set:close()
      return nil, string.format("shard %d of %d: %s", k, S, tostring(err))
    end
    set.list[k] = s
    set.merges[k], set.useful[k] = 0, 0
    if standbys then -- its two addresses: the primary serves at one, its standby listens at the other
      set.slot[k], set.pslot[k] = { with_port(ok.listen, s:port()) }, 1
      local sok, serr = set:start_standby(k, with_port(ok.listen, 0))
      if not sok then
        set:close()
        return nil, serr
      end
      set.slot[k][2] = with_port(ok.listen, set.sb[k]:port())
    end
  end
  return set
end

-- ---- standbys (islands.standbys: docs/shards.md, "Standbys") ----

-- A standby of shard k's primary, listening at listen (its free slot by default).
function Set:start_standby(k, listen)
  local o = {}
  for key, v in pairs(self.opts) do o[key] = v end
  local primary = self.slot[k][self.pslot[k]]
  o.shard, o.shards = self.S > 1 and k or nil, self.S > 1 and self.S or nil
  o.standby_of = diloco.advertise_address(primary, tonumber(primary:match(":(%d+)$")))
  o.listen = listen or self.slot[k][3 - self.pslot[k]]
  o.resume, o.epoch, o.start_learners = nil, nil, 0
  local s, err = diloco.Syncer(o)
  if not s then return nil, string.format("shard %d of %d's standby: %s", k, self.S, tostring(err)) end
  self.sb[k] = s
  return true
end
function Set:has_standby(k) return self.sb[k] and true or false end
function Set:standby_ports()
  if not self.standbys then return nil end
  local t = {}
  for k = 1, self.S do t[k] = tonumber(self.slot[k][2]:match(":(%d+)$")) end
  return t
end
-- Shard k's primary is killed (no BYE: its standby takes over after its lease); what it had
-- posted is still reported.  keep: it is not killed but set aside (self.zombie[k]) as one
-- its standby took over from while it was stopped (a pause), its events no longer read.
function Set:kill_primary(k, keep)
  local s = self.list[k]
  if not s then return end
  while true do
    local ev = s:poll(0)
    if not ev then break end
    ev = self:take(k, ev)
    if ev then self.pending[#self.pending + 1] = ev end
  end
  self.epoch_of[k] = s:epoch()
  if keep then self.zombie[k] = s else s:kill() end
  self.list[k], self.killed[k] = false, true
  -- the merges its standby recorded that it never reported (acknowledged, not yet posted)
  local held = self.rbuf[k] or {}
  self.rbuf[k] = nil
  table.sort(held, function(a, b) return a.merge.version < b.merge.version end)
  for _, ev in ipairs(held) do
    ev = self:take(k, ev, true)
    if ev then self.pending[#self.pending + 1] = ev end
  end
end
function Set:kill_standby(k)
  if self.sb[k] then self.sb[k]:kill() end
  self.sb[k], self.rbuf[k] = nil, nil
end
-- A killed primary whose standby has not taken over yet.
function Set:awaiting_takeover()
  for k = 1, self.S do if self.killed[k] then return true end end
  return false
end
-- Shard k's event ev (tagged shard k): merges counted, and with standbys each version of a
-- fragment reported once (a standby records its primary's merges; after a kill the ones
-- the primary made and never posted come from it).  nil: not reported.
function Set:take(k, ev, from_standby)
  ev.shard = self.S > 1 and k or nil -- (one syncer with a standby: no shard on its records)
  if ev.type == "merged" then
    if self.standbys then
      local f, v = ev.merge.fragment, ev.merge.version
      if from_standby and not self.killed[k] then -- its primary reports them; kept until it has
        local held, kept = self.rbuf[k] or {}, {}
        held[#held + 1] = ev
        for _, h in ipairs(held) do -- (bounded: one a version its primary has not reported yet)
          if h.merge.version > (self.reported[h.merge.fragment] or -1) then kept[#kept + 1] = h end
        end
        self.rbuf[k] = kept
        return nil
      end
      if v <= (self.reported[f] or -1) then return nil end
      self.reported[f], self.reported_by[f] = v, k
    end
    self:count(k, ev)
  elseif from_standby and ev.type == "standby" and ev.epoch then -- it took over: it serves shard k now
    local paused = self.list[k] and not self.killed[k] -- its primary stopped past the lease (a pause)
    if paused then
      self:kill_primary(k, true) -- (what it posted first, then this)
      if self.zombie[k]:paused() == 0 then -- gone on already: ended now (else when its pause ends)
        self.zombie[k]:kill()
        self.zombie[k] = nil
      end
    end
    self.list[k], self.sb[k], self.killed[k] = self.sb[k], nil, nil
    self.pslot[k] = 3 - self.pslot[k]
    if paused then
      self.pending[#self.pending + 1] = ev
      return nil
    end
  end
  return ev
end

-- The shards serving now, with their index: for k, s in self:each() (a shard a chaos
-- fault stopped is false in self.list until it is back).
function Set:each()
  local k = 0
  return function()
    repeat k = k + 1 until k > self.S or self.list[k]
    if k <= self.S then return k, self.list[k] end
  end
end
function Set:is_down(k) return self.list[k] == false end
function Set:any_down()
  for k = 1, self.S do if self.list[k] == false then return true end end
  return false
end
-- Shard k stops (a chaos fault): its driver closed, nothing saved; the others serve on.
function Set:down(k)
  if not self.list[k] then return end
  self.epoch_of[k] = self.list[k]:epoch()
  self.list[k]:close()
  self.list[k] = false
end
-- Shard k back from its file of the checkpoint set at resume (nil: afresh), at listen,
-- stamping at least epoch.  Returns true, or nil and the error.
function Set:up(k, resume, listen, epoch)
  local o = {}
  for key, v in pairs(self.opts) do o[key] = v end
  if self.standbys then -- at its serving address; its versions start again from its checkpoint's
    listen = self.slot[k][self.pslot[k]]
    for f, kk in pairs(self.reported_by) do
      if kk == k then self.reported[f], self.reported_by[f] = nil, nil end
    end
  end
  o.shard, o.shards, o.listen, o.epoch, o.start_learners = self.S > 1 and k or nil, self.S > 1 and self.S or nil,
    listen, epoch, 0
  o.resume = resume and M.side_path(resume, k) or nil
  local s, err = diloco.Syncer(o)
  if not s then return nil, string.format("shard %d of %d: %s", k, self.S, tostring(err)) end
  self.list[k] = s
  return true
end
-- Merges of each shard since the set started, and their useful tokens (its checkpoints
-- keep them: a shard brought back from one loses those made after it).
function Set:merge_counts() return self.merges end
function Set:count(k, ev)
  self.merges[k] = self.merges[k] + 1
  self.useful[k] = self.useful[k] + (ev.merge and ev.merge.useful_tokens or 0)
end

function Set:shards() return self.S end
function Set:port() return self.list[1]:port() end
function Set:ports()
  local t = {}
  for k, s in self:each() do t[k] = s:port() end
  return t
end
-- The latest epoch of the shards (each stamps its own; Set:epochs lists them).
function Set:epoch()
  local e = 0
  for k = 1, self.S do e = math.max(e, self.list[k] and self.list[k]:epoch() or self.epoch_of[k] or 0) end
  return e
end
function Set:epochs()
  local t = {}
  for k = 1, self.S do t[k] = self.list[k] and self.list[k]:epoch() or self.epoch_of[k] end
  return t
end
function Set:close()
  for k, z in pairs(self.zombie) do
    z:kill()
    self.zombie[k] = nil
  end
  for _, s in self:each() do s:close() end -- (a primary's end ends its standby)
  for k = 1, self.S do
    if self.sb[k] then self.sb[k]:close() end
    self.sb[k] = nil
  end
end
function Set:flush()
  for _, s in self:each() do s:flush() end
  return true
end
function Set:set_quorum(k)
  for _, s in self:each() do s:set_quorum(k) end
end
function Set:shape(m, rate, latency)
  for _, s in self:each() do s:shape(m, rate, latency) end
end
function Set:cut(m, seconds)
  for _, s in self:each() do s:cut(m, seconds) end
end
-- Every shard writes its own fragments: the whole global model.
function Set:global(params)
  for _, s in self:each() do s:global(params) end
end
-- The shards' checkpoints: the others first, beside path, shard 1's at path last (its
-- presence says the set is whole: a kill in between leaves the newest set as it was).
function Set:save(path, meta)
  if self:any_down() then return nil, "a shard is down: a checkpoint set holds every shard" end
  local m = {}
  for key, v in pairs(meta or {}) do m[key] = v end
  m["diloco.shard_merges"] = table.concat(self.merges, ",")
  local u = {}
  for k = 1, self.S do u[k] = string.format("%.17g", self.useful[k]) end
  m["diloco.shard_useful"] = table.concat(u, ",")
  for k = self.S, 1, -1 do
    local ok, err = self.list[k]:save(M.side_path(path, k), m)
    if not ok then return nil, string.format("shard %d: %s", k, tostring(err)) end
  end
  return true
end
-- The next event of any shard (tagged `shard`), waiting up to timeout for one.
function Set:poll(timeout)
  local S = self.S
  if #self.pending > 0 then return table.remove(self.pending, 1) end
  for k = 1, self.standbys and S or 0 do -- standbys: attached, took over, a killed primary's merges
    local sb = self.sb[k]
    while sb do
      local ev, err = sb:poll(0)
      if ev == nil and err then return nil, string.format("shard %d's standby: %s", k, err) end
      if not ev then break end
      ev.standby = true
      ev = self:take(k, ev, true)
      if ev then return ev end
    end
  end
  for i = 0, S - 1 do
    local k = (self.turn + i - 1) % S + 1
    local ev, err
    if self.list[k] then ev, err = self.list[k]:poll(0) end
    if ev == nil and err then return nil, string.format("shard %d: %s", k, err) end
    if ev then
      self.turn = k % S + 1
      ev = self:take(k, ev)
      if ev then return ev end
    end
  end
  if not timeout or timeout <= 0 then return nil end
  local k = self.turn
  self.turn = k % S + 1
  if not self.list[k] then
    diloco.proc.sleep(timeout / S)
    return nil
  end
  local ev, err = self.list[k]:poll(timeout / S)
  if ev == nil and err then return nil, string.format("shard %d: %s", k, err) end
  if ev then ev = self:take(k, ev) end
  return ev
end

local SUM = { merged = true, merged_steps = true, bytes_in = true, bytes_out = true, held = true, held_bytes = true,
  queued_bytes = true }
local MAX = { steps = true, tokens = true, heard = true, absent = true, joins = true, cut = true }
-- What the shards know of learner m: connected and joined on every shard, gone (bye) from
-- every one; its report (steps, tokens, times) the latest; its merges and bytes added up.
function Set:learner(m)
  local out
  for _, s in self:each() do
    local i = s:learner(m)
    if not out then
      out = i
    else
      out.connected = out.connected and i.connected
      out.joined = out.joined and i.joined
      out.bye = out.bye and i.bye
      for k in pairs(SUM) do if i[k] then out[k] = (out[k] or 0) + i[k] end end
      for k in pairs(MAX) do if i[k] and (out[k] == nil or i[k] > out[k]) then out[k] = i[k] end end
    end
  end
  return out
end
-- The run's counters over every shard: merges, rejects, bytes, refusals added up; live the
-- fewest any shard sees.
function Set:stats()
  local out
  for _, s in self:each() do
    local st = s:stats()
    if not out then
      out = st
    else
      for k, v in pairs(st) do
        if k == "live" then out.live = math.min(out.live, v)
        elseif k == "now" or k == "learners" then -- (the same)
        elseif math.type(v) or type(v) == "number" then out[k] = (out[k] or 0) + v
        elseif type(v) == "table" then -- refused_by {reason = n}, bytes_by_type {type = {up, down}}
          out[k] = out[k] or {}
          for kk, vv in pairs(v) do
            if type(vv) == "table" then
              local t = out[k][kk] or { up = 0, down = 0 }
              t.up, t.down = t.up + (vv.up or 0), t.down + (vv.down or 0)
              out[k][kk] = t
            else
              out[k][kk] = (out[k][kk] or 0) + vv
            end
          end
        end
      end
    end
  end
  return out
end

return M
