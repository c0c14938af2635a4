-- diloco.recipe_chaos: a recipe's `chaos` section checked and normalized (docs/recipes.md,
-- "chaos"): scripted events, each of one kind with its fields, and the random policy.
-- recipe.lua (diloco.recipe.validate) calls M.normalize; the checks it shares with the rest
-- of the recipe are recipe.lua's own (diloco.recipe._check), bound at the first call.
local M = {}

local INF = math.huge
local describe, count_keys, is_int, link_problem, DURATION_FORM, RATE_FORM, parse_duration, parse_rate
local function bind()
  if describe then return end
  local recipe = require "diloco.recipe"
  local H = recipe._check
  describe, count_keys, is_int, link_problem = H.describe, H.count_keys, H.is_int, H.link_problem
  DURATION_FORM, RATE_FORM = H.DURATION_FORM, H.RATE_FORM
  parse_duration, parse_rate = recipe.parse_duration, recipe.parse_rate
end

-- chaos -> { seed = int, events = { {at, kind, learner, duration, factor}, ... } sorted
-- by at (stable), random = nil or {mtbf, down, learners, exponential_down} }.  After
-- islands (the learner indices are checked against islands.count).
local EVENT_KINDS = { "kill", "pause", "slow", "cut", "syncer", "link" }
local EVENT_FIELDS = {
  kill = { at = true, kill = true, down = true, rank = true },
  pause = { at = true, pause = true, down = true },
  slow = { at = true, slow = true, factor = true, duration = true },
  cut = { at = true, cut = true, down = true },
  syncer = { at = true, syncer = true, down = true, shard = true, role = true },
  link = { at = true, link = true, bandwidth = true, latency = true, duration = true },
  normalized = { at = true, kind = true, learner = true, duration = true, factor = true, bandwidth = true,
    latency = true, rank = true, shard = true, role = true },
}
local EVENT_FORM = '{ at = "20s", kill = 2, down = "10s" }, { at = "30s", slow = 1, factor = 3, duration = "15s" }, '
  .. '{ at = "40s", cut = 3, down = "5s" }, { at = "45s", link = 2, bandwidth = "20Mbps", latency = "50ms", '
  .. 'duration = "30s" } or { at = "50s", syncer = "down", down = "8s" } or { at = "60s", syncer = "pause", down = "3s" }'

local function sorted_keys(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = tostring(k) end
  table.sort(names)
  return table.concat(names, ", ")
end

-- A duration that may be "inf" / math.huge (forever); nil -> forever.
local function lasting(v)
  if v == nil or v == INF or v == "inf" or v == "never" then return INF end
  local s = parse_duration(v)
  return s and s + 0.0
end

local function check_event(ev, name, count, errs)
  if type(ev) ~= "table" then
    errs[#errs + 1] = string.format("%s = %s: expected an event table such as %s", name, describe(ev), EVENT_FORM)
    return
  end
  local kinds = {}
  for _, k in ipairs(EVENT_KINDS) do
    if ev[k] ~= nil then kinds[#kinds + 1] = k end
  end
  local kind = kinds[1]
  if ev.kind ~= nil and #kinds == 0 then -- the normalized form, as validation writes it
    kind = ev.kind
    if EVENT_FIELDS[kind] == nil or kind == "normalized" then
      errs[#errs + 1] = string.format("%s.kind = %s: expected one of kill, pause, slow, cut, syncer, link", name,
        describe(kind))
      return
    end
  elseif #kinds ~= 1 then
    local got = {}
    for i, k in ipairs(kinds) do got[i] = k .. " = " .. describe(ev[k]) end
    errs[#errs + 1] = string.format("%s %s: expected exactly one of kill, pause, slow, cut, syncer, link per event (%s)",
      name,
      #kinds == 0 and "names no fault" or "has " .. table.concat(got, " and "), EVENT_FORM)
    return
  end
  local normalized = ev.kind ~= nil and #kinds == 0
  local allowed = EVENT_FIELDS[normalized and "normalized" or kind]
  local before = #errs
  for k in pairs(ev) do
    if not allowed[k] then
      errs[#errs + 1] = string.format("%s.%s: unknown field for a %s event (allowed: %s)", name, tostring(k), kind,
        sorted_keys(allowed))
    end
  end
  local out = { kind = kind }
  if ev.at == nil then
    errs[#errs + 1] = string.format("%s.at: missing (when it happens, virtual time from the start: %s)", name,
      DURATION_FORM)
  else
    out.at = parse_duration(ev.at)
    out.at = out.at and out.at + 0.0
    if not out.at then errs[#errs + 1] = string.format("%s.at = %s: expected %s", name, describe(ev.at), DURATION_FORM) end
  end
  local lkey = normalized and "learner" or kind
  -- a fault of the syncer: { syncer = "down" } (kind syncer) or { syncer = "pause" } (kind
  -- pause naming no learner: the syncer stopped where it is, docs/chaos.md)
  if kind == "syncer" or (normalized and kind == "pause" and ev.learner == nil) then
    if not normalized and ev.syncer ~= "down" and ev.syncer ~= "pause" then
      errs[#errs + 1] = string.format("%s.syncer = %s: expected \"down\" (stopped, back from its checkpoint) or "
        .. "\"pause\" (stopped where it is, going on with its state)", name, describe(ev.syncer))
    end
    if not normalized and ev.syncer == "pause" then out.kind = "pause" end
    if normalized and ev.learner ~= nil then
      errs[#errs + 1] = string.format("%s.learner = %s: expected nil (a syncer event names no learner)", name,
        describe(ev.learner))
    end
    if ev.shard ~= nil then -- one shard of a syncer in shards (islands.syncers; docs/shards.md)
      if is_int(ev.shard) and ev.shard >= 1 and ev.shard <= 16 then out.shard = math.tointeger(ev.shard)
      else errs[#errs + 1] = string.format("%s.shard = %s: expected a shard in [1, islands.syncers]", name,
        describe(ev.shard)) end
    end
    if ev.role ~= nil then -- which process, with standbys (islands.standbys; docs/shards.md, "Standbys")
      if ev.role == "primary" or ev.role == "standby" or ev.role == "both" then out.role = ev.role
      else errs[#errs + 1] = string.format("%s.role = %s: expected \"primary\" (its standby takes over), \"standby\" "
        .. "or \"both\"", name, describe(ev.role)) end
    end
  else
    local l = ev[lkey]
    if not (is_int(l) and l >= 1 and (count == nil or l <= count)) then
      errs[#errs + 1] = count
        and string.format("%s.%s = %s: expected a learner index in [1, %d] (islands.count = %d)", name, lkey,
          describe(l), count, count)
        or string.format("%s.%s = %s: expected a learner index >= 1", name, lkey, describe(l))
    else
      out.learner = math.tointeger(l)
    end
  end
  local dkey = (normalized or kind == "slow" or kind == "link") and "duration" or "down"
  out.duration = lasting(ev[dkey])
  if not out.duration then
    errs[#errs + 1] = string.format("%s.%s = %s: expected %s, or nil/\"inf\" for %s", name, dkey, describe(ev[dkey]),
      DURATION_FORM, (kind == "slow" or kind == "link") and "the rest of the run" or "never back")
  end
  if kind == "slow" then
    local f = ev.factor
    if f == nil then
      errs[#errs + 1] = string.format("%s.factor: missing (a slow event multiplies the learner's step time by it)",
        name)
    elseif type(f) ~= "number" or f ~= f or f <= 0 or f == INF then
      errs[#errs + 1] = string.format("%s.factor = %s: expected a finite number > 0 (the learner's step time is "
        .. "multiplied by it)", name, describe(f))
    else
      out.factor = f
    end
  elseif normalized and ev.factor ~= nil then
    errs[#errs + 1] = string.format("%s.factor = %s: expected nil (only a slow event has a factor)", name,
      describe(ev.factor))
  end
  if kind == "link" then
    if ev.bandwidth == nil and ev.latency == nil then
      errs[#errs + 1] = string.format("%s: a link event sets bandwidth, latency or both (e.g. bandwidth = \"20Mbps\", "
        .. "latency = \"50ms\")", name)
    end
    if ev.bandwidth ~= nil then
      out.bandwidth = parse_rate(ev.bandwidth)
      if not out.bandwidth then
        errs[#errs + 1] = string.format("%s.bandwidth = %s: expected %s", name, describe(ev.bandwidth), RATE_FORM)
      end
    end
    if ev.latency ~= nil then
      out.latency = parse_duration(ev.latency)
      out.latency = out.latency and out.latency + 0.0
      if not out.latency then
        errs[#errs + 1] = string.format("%s.latency = %s: expected %s", name, describe(ev.latency), DURATION_FORM)
      end
    end
    local field, expected = link_problem(out.bandwidth, out.latency)
    if field then errs[#errs + 1] = string.format("%s.%s = %s: expected %s", name, field, describe(ev[field]), expected) end
  elseif normalized and (ev.bandwidth ~= nil or ev.latency ~= nil) then
    errs[#errs + 1] = string.format("%s.%s = %s: expected nil (only a link event has a bandwidth and a latency)", name,
      ev.bandwidth ~= nil and "bandwidth" or "latency", describe(ev.bandwidth or ev.latency))
  end
  if ev.rank ~= nil then -- kill one MPI rank of an island of several (docs/mpi.md)
    if kind ~= "kill" then
      errs[#errs + 1] = string.format("%s.rank = %s: expected nil (only a kill names a rank)", name, describe(ev.rank))
    elseif not (is_int(ev.rank) and ev.rank >= 0) then
      errs[#errs + 1] = string.format("%s.rank = %s: expected an MPI rank >= 0 of the island (0 is its learner)", name,
        describe(ev.rank))
    else
      out.rank = math.tointeger(ev.rank)
    end
  end
  if #errs == before then return out end
end

local RANDOM_FORM = '{ mtbf = "60s", down = "15s", learners = {1, 2}, exponential_down = false }'
local function check_random(rd, count, errs)
  if type(rd) ~= "table" then
    errs[#errs + 1] = string.format("chaos.random = %s: expected a table %s", describe(rd), RANDOM_FORM)
    return
  end
  local before = #errs
  local allowed = { mtbf = true, down = true, learners = true, exponential_down = true }
  for k in pairs(rd) do
    if not allowed[k] then
      errs[#errs + 1] = string.format("chaos.random.%s: unknown field (allowed: %s)", tostring(k), sorted_keys(allowed))
    end
  end
  local out = { exponential_down = rd.exponential_down == true }
  if rd.mtbf == nil then
    errs[#errs + 1] = "chaos.random.mtbf: missing (mean time between failures of each learner: " .. DURATION_FORM .. ")"
  else
    out.mtbf = parse_duration(rd.mtbf)
    out.mtbf = out.mtbf and out.mtbf + 0.0
    if not out.mtbf or out.mtbf <= 0 then
      errs[#errs + 1] = string.format("chaos.random.mtbf = %s: expected a duration > 0 (mean time between failures "
        .. "of each learner): %s", describe(rd.mtbf), DURATION_FORM)
    end
  end
  if rd.down == nil then
    errs[#errs + 1] = "chaos.random.down: missing (how long a failed learner stays down: " .. DURATION_FORM .. ")"
  else
    out.down = parse_duration(rd.down)
    out.down = out.down and out.down + 0.0
    if not out.down then
      errs[#errs + 1] = string.format("chaos.random.down = %s: expected %s", describe(rd.down), DURATION_FORM)
    end
  end
  if rd.exponential_down ~= nil and type(rd.exponential_down) ~= "boolean" then
    errs[#errs + 1] = string.format("chaos.random.exponential_down = %s: expected boolean (down times exponential "
      .. "with mean down, else fixed)", describe(rd.exponential_down))
  end
  if rd.learners == nil then
    out.learners = {}
    for i = 1, count or 0 do out.learners[i] = i end
  elseif type(rd.learners) ~= "table" or count_keys(rd.learners) ~= #rd.learners then
    errs[#errs + 1] = string.format("chaos.random.learners = %s: expected a list of learner indices", describe(rd.learners))
  else
    out.learners = {}
    local seen = {}
    for i, l in ipairs(rd.learners) do
      if not (is_int(l) and l >= 1 and (count == nil or l <= count)) then
        errs[#errs + 1] = count
          and string.format("chaos.random.learners[%d] = %s: expected a learner index in [1, %d] (islands.count = %d)",
            i, describe(l), count, count)
          or string.format("chaos.random.learners[%d] = %s: expected a learner index >= 1", i, describe(l))
      elseif seen[l] then
        errs[#errs + 1] = string.format("chaos.random.learners[%d] = %s: expected each learner once", i, describe(l))
      else
        seen[l] = true
        out.learners[#out.learners + 1] = math.tointeger(l)
      end
    end
  end
  if #errs == before then return out end
end

function M.normalize(r, errs)
  bind()
  local c = r.chaos
  if type(c) ~= "table" then return end -- nil, or its type error is reported already
  local count = type(r.islands) == "table" and is_int(r.islands.count) and r.islands.count or nil
  local before = #errs
  local src, prefix = c, "chaos"
  for k in pairs(c) do
    if not (math.type(k) == "integer" and k >= 1 and k <= #c) and k ~= "random" and k ~= "seed" and k ~= "events" then
      errs[#errs + 1] = string.format("chaos.%s: unknown field (allowed: random, seed, and scripted events in the "
        .. "array part, or as events)", tostring(k))
    end
  end
  if c.events ~= nil then
    if #c > 0 then
      errs[#errs + 1] = string.format("chaos: %d events in its array part and chaos.events = %s: expected one of the "
        .. "two", #c, describe(c.events))
    elseif type(c.events) ~= "table" or count_keys(c.events) ~= #c.events then
      errs[#errs + 1] = string.format("chaos.events = %s: expected a list of events", describe(c.events))
    end
    src, prefix = c.events, "chaos.events"
  end
  local seed = c.seed
  if seed == nil then
    seed = is_int(r.seed) and r.seed or 0
  elseif not (is_int(seed) and seed >= 0) then
    errs[#errs + 1] = string.format("chaos.seed = %s: expected an integer >= 0 (default: the recipe's seed)",
      describe(seed))
  end
  local events, random = {}, nil
  if #errs == before then
    for i = 1, #src do
      local ev = check_event(src[i], string.format("%s[%d]", prefix, i), count, errs)
      local isl = ev and ev.rank and ev.learner and type(r.islands) == "table" and r.islands.list
        and r.islands.list[ev.learner]
      if isl and ev.rank >= (isl.ranks or 1) then
        errs[#errs + 1] = string.format("%s[%d].rank = %d: island %d has %d rank%s: expected a rank in [0, %d]", prefix,
          i, ev.rank, ev.learner, isl.ranks or 1, (isl.ranks or 1) == 1 and "" or "s", (isl.ranks or 1) - 1)
        ev = nil
      end
      if ev then
        ev.i = i
        events[#events + 1] = ev
      end
    end
  end
  if c.random ~= nil then random = check_random(c.random, count, errs) end
  if #errs > before then return end
  table.sort(events, function(a, b)
    if a.at ~= b.at then return a.at < b.at end
    return a.i < b.i
  end)
  for _, ev in ipairs(events) do ev.i = nil end
  r.chaos = { seed = math.tointeger(seed), events = events, random = random }
end

return M
