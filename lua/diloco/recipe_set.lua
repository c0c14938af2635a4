-- diloco.recipe_set: the `--set KEY=VALUE` overrides (docs/cli.md): the key walked through
-- the recipe's sections as the schema allows, the value parsed as a Lua literal (a number,
-- string, boolean or a table of those; no code: nothing outside string literals may call,
-- index or name a variable).  diloco.recipe.set calls M.apply; the schema and the marks
-- validation reads (a number's text as written, a field set from the command line) are
-- recipe.lua's own (diloco.recipe._check), bound at the first call.
local M = {}

local schema, written, from_set
local function bind()
  if schema then return end
  local recipe = require "diloco.recipe"
  schema, written, from_set = recipe.schema, recipe._check.written, recipe._check.from_set
end

-- The text of s outside its string literals (quoted ones with their escapes, long
-- brackets), so that a check for code sees no character of a string.
local function outside_strings(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:sub(i, i)
    if c == '"' or c == "'" then
      local j = i + 1
      while j <= n and s:sub(j, j) ~= c do j = j + (s:sub(j, j) == "\\" and 2 or 1) end
      i = j + 1
    elseif s:find("^%[=*%[", i) then
      local eq = s:match("^%[(=*)%[", i)
      local close = s:find("]" .. eq .. "]", i, true)
      i = close and close + #eq + 2 or n + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

-- Parses the v of --set k=v: numbers, true/false, Lua table literals {…}, quoted or
-- bare strings.
local function parse_value(s)
  if s == "true" then return true end
  if s == "false" then return false end
  if s == "nil" then return nil end
  local n = math.tointeger(tonumber(s)) or tonumber(s)
  if n then return n end
  if s:match("^%s*{") or s:match("^%s*[\"']") then
    -- data only: outside its strings, no call, method or function (a value such as
    -- {(function() while true do end end)()} would run, or loop for ever, right here)
    local bare = outside_strings(s)
    if bare:find("[():]") or bare:find("%f[%w_]function%f[^%w_]") then
      error(string.format("cannot take %q as a value: expected data (a number, a quoted string, true, false, or a "
        .. "table of them), without calls or functions", s), 0)
    end
    local f = load("return " .. s, "--set", "t", {})
    local ok, v = pcall(f or error)
    if f and ok then return v end
    error(string.format("cannot parse %q as a Lua value", s), 0)
  end
  return s
end

-- Applies one "a.b.c=value" override.  Raises a message naming the key on error.
function M.apply(r, assignment)
  bind()
  local key, value = assignment:match("^([%w_%.]+)=(.*)$")
  if not key then
    error(string.format("--set %s: expected KEY=VALUE with a dotted key (e.g. inner.lr=1e-3)", assignment), 0)
  end
  local parts = {}
  for p in (key .. "."):gmatch("([^%.]*)%.") do parts[#parts + 1] = p end
  for _, p in ipairs(parts) do
    if not p:match("^[%a_][%w_]*$") then
      error(string.format("--set %s: malformed key '%s': expected field names joined by single dots "
        .. "(e.g. inner.lr=1e-3)", assignment, key), 0)
    end
  end
  local t, spec = r, { fields = schema }
  for i = 1, #parts - 1 do
    local p = parts[i]
    local sub = spec and spec.fields and spec.fields[p]
    if type(t[p]) == "function" then
      error(string.format("--set %s: %s is a function in this recipe; edit the recipe instead", assignment,
        table.concat(parts, ".", 1, i)), 0)
    end
    if t[p] == nil then
      if sub or (spec and (spec.open or spec.kind == "table|function")) then
        t[p] = {}
      else
        error(string.format("--set %s: unknown field %s", assignment, table.concat(parts, ".", 1, i)), 0)
      end
    elseif type(t[p]) ~= "table" then
      error(string.format("--set %s: %s is a %s, not a section", assignment, table.concat(parts, ".", 1, i),
        type(t[p])), 0)
    end
    t, spec = t[p], sub or { open = true }
  end
  local ok, v = pcall(parse_value, value)
  if not ok then error("--set " .. assignment .. ": " .. v, 0) end
  t[parts[#parts]] = v
  written[t] = written[t] or {}
  written[t][parts[#parts]] = type(v) == "number" and value:match("^%s*(.-)%s*$") or nil
  from_set[t] = from_set[t] or {}
  from_set[t][parts[#parts]] = true
end

return M
