-- diloco.chaos: constructors of a recipe's `chaos` field (faults for `diloco-lua sim`).
--
--   chaos = diloco.chaos.combine(
--     diloco.chaos.timeline {
--       { at = "20s", kill = 2, down = "10s" },            -- learner 2 dies, back after 10 s
--       { at = "30s", slow = 1, factor = 3, duration = "15s" },  -- learner 1 steps 3x slower
--       { at = "40s", cut = 3, down = "5s" },              -- learner 3's link to the syncer cut
--       { at = "50s", syncer = "down", down = "8s" },      -- the syncer down for 8 s
--     },
--     diloco.chaos.poisson { mtbf = "60s", down = "15s", learners = { 1, 2 }, seed = 7 })
--
-- They only build plain tables (so the recipe's JSON copy shows them as written);
-- diloco.recipe.validate checks every field and normalizes them (docs/recipes.md,
-- "Chaos").
local M = {}

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
  return c
end

-- timeline{ev, ev, ...}: the list of scripted events, as a chaos table.
function M.timeline(events)
  if type(events) ~= "table" then error("diloco.chaos.timeline: expected a list of event tables", 2) end
  local out = {}
  for k, ev in pairs(events) do
    if math.type(k) ~= "integer" or k < 1 or k > #events then
      error(string.format("diloco.chaos.timeline: key %s: expected a list of event tables", tostring(k)), 2)
    end
    if type(ev) ~= "table" then
      error(string.format("diloco.chaos.timeline: item %d is a %s: expected an event table such as "
        .. '{ at = "20s", kill = 2, down = "10s" }', k, type(ev)), 2)
    end
    out[k] = copy(ev)
  end
  return out
end

local POISSON = { mtbf = true, down = true, learners = true, exponential_down = true, seed = true }

-- poisson{mtbf = "60s", down = "15s", learners = {...} (default all), exponential_down
-- = false, seed = n (default the recipe's)}: each listed learner fails after an
-- exponential time with mean mtbf and stays down for `down` (exponential with that
-- mean when exponential_down).  Returns { random = {...}, seed = seed }.
function M.poisson(opts)
  if type(opts) ~= "table" then error("diloco.chaos.poisson: expected a table { mtbf = ..., down = ... }", 2) end
  for k in pairs(opts) do
    if not POISSON[k] then
      error(string.format("diloco.chaos.poisson: unknown option %s (allowed: down, exponential_down, learners, "
        .. "mtbf, seed)", tostring(k)), 2)
    end
  end
  local random = {}
  for k, v in pairs(opts) do
    if k ~= "seed" then random[k] = type(v) == "table" and copy(v) or v end
  end
  return { random = random, seed = opts.seed }
end

-- combine(a, b, ...): one chaos table with the events of all (in order), the random
-- policy of the one that has it and its seed.  nil arguments are skipped; two random
-- policies or two different seeds are an error.
function M.combine(...)
  local out = {}
  for i = 1, select("#", ...) do
    local c = select(i, ...)
    if c ~= nil then
      if type(c) ~= "table" then error(string.format("diloco.chaos.combine: argument %d is a %s: expected a chaos "
        .. "table", i, type(c)), 2) end
      for _, ev in ipairs(c) do out[#out + 1] = copy(ev) end
      if c.events then
        for _, ev in ipairs(c.events) do out[#out + 1] = copy(ev) end
      end
      if c.random ~= nil then
        if out.random ~= nil then
          error("diloco.chaos.combine: more than one random policy: expected at most one", 2)
        end
        out.random = copy(c.random)
      end
      if c.seed ~= nil then
        if out.seed ~= nil and out.seed ~= c.seed then
          error(string.format("diloco.chaos.combine: seeds %s and %s: expected one seed", tostring(out.seed),
            tostring(c.seed)), 2)
        end
        out.seed = c.seed
      end
    end
  end
  return out
end

return M
