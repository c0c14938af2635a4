-- diloco.recipe_islands: a recipe's `islands` section checked and normalized (docs/recipes.md,
-- "islands"): a count with shared settings, or a list of islands each with its own.
-- recipe.lua (diloco.recipe.validate) calls M.normalize; the checks it shares with the rest
-- of the recipe are recipe.lua's own (diloco.recipe._check), bound at the first call.
local M = {}

local ISLAND_FIELDS, check_section, count_keys, describe, from_set, is_int, link_problem, speed_check, written
local schema, parse_duration, parse_rate
local function bind()
  if describe then return end
  local recipe = require "diloco.recipe"
  local H = recipe._check
  ISLAND_FIELDS, check_section, count_keys, describe = H.ISLAND_FIELDS, H.check_section, H.count_keys, H.describe
  from_set, is_int, link_problem, speed_check, written = H.from_set, H.is_int, H.link_problem, H.speed_check, H.written
  schema, parse_duration, parse_rate = recipe.schema, recipe.parse_duration, recipe.parse_rate
end

-- islands, either form, -> { count = M, step_time = s, list = { {speed, batch, shard,
-- latency = s, bandwidth = bytes/s}, ... } }.  Runs after the other sections (for
-- data.batch).
function M.normalize(r, errs)
  bind()
  if type(r.islands) ~= "table" then return end -- its type error is reported already
  local isl = {} -- a copy: the recipe's own table is left as written
  for k, v in pairs(r.islands) do isl[k] = v end
  local before = #errs
  local lprefix = "islands.list"
  if #isl > 0 then
    if isl.list ~= nil then
      errs[#errs + 1] = string.format("islands: %d island tables in its array part and islands.list = %s: "
        .. "expected one of the two", #isl, describe(isl.list))
      return
    end
    local arr = {}
    for i = 1, #isl do
      arr[i] = isl[i]
      isl[i] = nil
    end
    isl.list, lprefix = arr, "islands"
  end
  local given_latency, given_bandwidth = isl.latency, isl.bandwidth -- before the defaults fill them
  check_section(isl, schema.islands.fields, "islands.", errs, false)
  if #errs > before then return end
  local list, count = isl.list, isl.count
  if list ~= nil then
    if #list == 0 or count_keys(list) ~= #list then
      errs[#errs + 1] = string.format("%s = %s: expected a non-empty list of island tables", lprefix, describe(list))
      return
    end
    if #list > 64 then
      errs[#errs + 1] = string.format("islands: %d island tables: expected at most 64", #list)
      return
    end
    if count ~= nil and count ~= #list then
      errs[#errs + 1] = string.format("islands.count = %d but islands lists %d island tables: expected count = %d "
        .. "(or no count: a list fixes it)", count, #list, #list)
      return
    end
    count = #list
    -- an islands field given with --set that island tables of the list set for
    -- themselves: theirs win, so the --set would change nothing for them
    for _, field in ipairs({ "speed", "batch", "latency", "bandwidth" }) do
      if from_set[r.islands] and from_set[r.islands][field] then
        local own = {}
        for i, e in ipairs(list) do
          if type(e) == "table" and e[field] ~= nil then own[#own + 1] = string.format("%s[%d]", lprefix, i) end
        end
        if #own > 0 then
          errs[#errs + 1] = string.format("--set islands.%s: %s %s own %s in the recipe's list of island tables, "
            .. "which wins over islands.%s: change it there (the list overrides islands.%s)",
            field, table.concat(own, ", "), #own == 1 and "sets its" or "set their", field, field, field)
        end
      end
    end
    if type(isl.speed) == "table" then
      errs[#errs + 1] = string.format("islands.speed = %s: expected a number (the default of every island) when "
        .. "islands is a list of island tables; give each island its speed in its table", describe(isl.speed))
    end
  end
  count = count or 1
  if type(isl.speed) == "number" and speed_check(isl.speed) then
    errs[#errs + 1] = string.format("islands.speed = %s: expected %s", describe(isl.speed), speed_check(isl.speed))
  elseif type(isl.speed) == "table" and list == nil then
    if #isl.speed ~= count or count_keys(isl.speed) ~= #isl.speed then
      errs[#errs + 1] = string.format("islands.speed has %d entries: expected one per island (islands.count = %d)",
        count_keys(isl.speed), count)
    end
    for i, v in pairs(isl.speed) do
      if math.type(i) ~= "integer" or type(v) ~= "number" or speed_check(v) then
        errs[#errs + 1] = string.format("islands.speed[%s] = %s: expected a finite number > 0 (relative speed)",
          describe(i), describe(v))
      end
    end
  end
  local dbatch = type(r.data) == "table" and is_int(r.data.batch) and r.data.batch or 16
  local out, link_reported, links = {}, false, nil
  for i = 1, count do
    local e, name = list and list[i] or {}, string.format("%s[%d]", lprefix, i)
    if type(e) ~= "table" then
      errs[#errs + 1] = string.format("%s = %s: expected an island table {speed, batch, shard, latency, bandwidth}",
        name, describe(e))
    else
      local c = {}
      for k, v in pairs(e) do c[k] = v end
      local b = #errs
      check_section(c, ISLAND_FIELDS, name .. ".", errs, false)
      if c.shard ~= nil and is_int(c.shard) and (c.shard < 1 or c.shard > count) then
        errs[#errs + 1] = string.format("%s.shard = %s: expected a data shard in [1, %d] (islands.count = %d)", name,
          describe(c.shard), count, count)
      end
      if #errs == b then
        local speed = c.speed
        if speed == nil then
          speed = type(isl.speed) == "number" and isl.speed or type(isl.speed) == "table" and isl.speed[i] or 1
        end
        local ranks = c.ranks or isl.ranks or 1
        out[i] = { speed = speed, batch = c.batch or isl.batch or dbatch, shard = c.shard or i,
          ranks = ranks > 1 and ranks or nil, -- (absent when 1, as recipes before it)
          latency = parse_duration(c.latency or isl.latency) + 0.0,
          bandwidth = parse_rate(c.bandwidth or isl.bandwidth) + 0.0 }
        -- the link the recipe gave (its own or islands'), which the real runtime shapes;
        -- absent: the runtime leaves the link alone (sim uses the defaults above)
        local gl, gb = c.latency or given_latency, c.bandwidth or given_bandwidth
        if isl.links == nil and (gl ~= nil or gb ~= nil) then
          local link = { latency = gl ~= nil and parse_duration(gl) + 0.0 or nil,
            bandwidth = gb ~= nil and parse_rate(gb) + 0.0 or nil }
          local field, expected = link_problem(link.bandwidth, link.latency)
          local own = field and c[field] ~= nil
          if field and (own or not link_reported) then -- an islands field once, not once per island
            link_reported = link_reported or not own
            errs[#errs + 1] = string.format("%s = %s: expected %s", own and name .. "." .. field or "islands." .. field,
              describe(own and c[field] or (field == "latency" and given_latency or given_bandwidth)), expected)
          end
          links = links or {}
          links[i] = link
        end
      end
    end
  end
  if #errs > before then return end
  if isl.links == false then -- validated already: no links
    links = false
  elseif isl.links ~= nil then -- a validated recipe again: its links as they were
    links = isl.links
    local ok = type(links) == "table" and #links == count and count_keys(links) == count
    for i = 1, ok and count or 0 do -- as validation wrote them (OUT/recipe.json writes math.huge as "inf")
      local l = links[i]
      ok = ok and type(l) == "table"
      if ok then
        local lat = l.latency ~= nil and parse_duration(l.latency) or nil
        local bw = l.bandwidth ~= nil and parse_rate(l.bandwidth) or nil
        ok = (l.latency == nil or lat ~= nil) and (l.bandwidth == nil or bw ~= nil)
        links[i] = { latency = lat and lat + 0.0, bandwidth = bw and bw + 0.0 }
      end
    end
    if not ok then
      errs[#errs + 1] = string.format("islands.links = %s: expected one table {latency = s, bandwidth = bytes/s} per "
        .. "island (%d), as validation writes it", describe(links), count)
      return
    end
  elseif links then
    for i = 1, count do links[i] = links[i] or {} end
  else
    links = false
  end
  r.islands = { count = count, step_time = parse_duration(isl.step_time) + 0.0, list = out, links = links,
    jitter = isl.jitter ~= 0 and isl.jitter or nil, -- (sim; absent when 0, as recipes before it)
    cores = isl.cores, -- (sim; absent: each island its own hardware)
    stop = isl.stop ~= "horizon" and isl.stop or nil, -- (sim; absent: at the horizon, as recipes before it)
    timeout = isl.timeout ~= nil and parse_duration(isl.timeout) + 0.0 or nil, -- (sim; absent: 10 step times)
    syncers = (isl.syncers or 1) > 1 and isl.syncers or nil, -- (absent when 1, as recipes before it)
    standbys = isl.standbys or nil } -- (absent when false)
end

return M
