-- diloco.recipe_json: the effective recipe, the one saved in OUT/recipe.json and in every
-- checkpoint (a checkpoint's recipe against the recipe that continues it: what changed).
local diloco = require "diloco"
local M = {}

-- The recipe as plain data (functions as "<function FILE:LINE>"), for JSON.
function M.effective(r)
  local seen = {}
  local function conv(v)
    local t = type(v)
    if t == "function" then
      local info = debug.getinfo(v, "S")
      return string.format("<function %s:%d>", info.short_src, info.linedefined)
    elseif t == "table" then
      if seen[v] then return "<cycle>" end
      seen[v] = true
      local c, n = {}, #v
      for k, x in pairs(v) do
        local key = k
        if not (math.type(k) == "integer" and k >= 1 and k <= n) then key = tostring(k) end
        c[key] = conv(x)
      end
      seen[v] = nil
      return c
    elseif t == "number" then
      if v ~= v or v == math.huge or v == -math.huge then return tostring(v) end
      return v
    elseif t == "string" or t == "boolean" then
      return v
    end
    return tostring(v)
  end
  return conv(r)
end

-- { ["inner.lr"] = <json text of the value>, ... } for every leaf (arrays are leaves).
local function flatten(t, prefix, into)
  into = into or {}
  for k, v in pairs(t) do
    local name = prefix .. tostring(k)
    if type(v) == "table" and next(v) ~= nil and #v == 0 then
      flatten(v, name .. ".", into)
    elseif type(v) == "number" then
      into[name] = diloco.metrics.double_text(v)
    else
      into[name] = diloco.json_encode(v, { sort_keys = true })
    end
  end
  return into
end

-- Fields that differ between two effective recipes: sorted list of {field, old, new}
-- (JSON texts; nil where absent).
function M.changes(old, new)
  local a, b = flatten(old, ""), flatten(new, "")
  local names, seen = {}, {}
  for k in pairs(a) do names[#names + 1], seen[k] = k, true end
  for k in pairs(b) do
    if not seen[k] then names[#names + 1] = k end
  end
  table.sort(names)
  local changes = {}
  for _, k in ipairs(names) do
    if a[k] ~= b[k] then changes[#changes + 1] = { field = k, old = a[k], new = b[k] } end
  end
  return changes
end

return M
