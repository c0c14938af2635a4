-- diloco.repl: the Lua side of the diloco-lua REPL (lua/main.c reads the lines).
--
--   repl.complete(word[, env]) -> sorted candidates for tab completion of word, the
--       text before the cursor back to a space or operator: "dil" -> {"diloco."},
--       "diloco.ze" -> {"diloco.zeros("}, "t:resh" -> {"t:reshape("}.  Globals and
--       keywords, fields of tables (diloco's submodules before they are loaded too, a
--       Tensor's properties), methods after ':' (of tables, classes, strings and
--       userdata types).  Functions get "(", tables "." (callable ones nothing).
--       Never raises.
--   repl.setup([env]) installs help and the pretty print() in env (default _G)
--   repl.show(...) prints a chunk's results: each readable (diloco.pretty)
local pretty = require "diloco.pretty"
local M = {}

local KEYWORDS = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
  "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
}

-- Methods and properties a value offers through its metatable.  Userdata whose
-- __index is a function keep their methods in an upvalue (lua/ldiloco.c).
local function meta_names(v, out, depth)
  local mt = getmetatable(v)
  if type(mt) ~= "table" or depth > 8 then return end
  local idx = rawget(mt, "__index")
  if type(idx) == "table" then
    for k, x in pairs(idx) do
      if type(k) == "string" and out[k] == nil then out[k] = x end
    end
    meta_names(idx, out, depth + 1)
  elseif type(idx) == "function" then
    for i = 1, 4 do
      local ok, _, up = pcall(debug.getupvalue, idx, i)
      if ok and type(up) == "table" then
        for k, x in pairs(up) do
          if type(k) == "string" and type(x) == "function" and out[k] == nil then out[k] = x end
        end
      end
    end
  end
end

-- Tensor fields served by its __index function (lua/ltensor.c), not in any table.
local TENSOR_PROPERTIES = { "shape", "ndim", "numel", "grad", "requires_grad", "is_leaf", "op" }

local function members(v)
  local out = {}
  if type(v) == "table" then
    for k, x in pairs(v) do if type(k) == "string" then out[k] = x end end
  end
  local diloco = package.loaded.diloco
  if type(v) == "userdata" and diloco and diloco.is_tensor(v) then
    for _, k in ipairs(TENSOR_PROPERTIES) do out[k] = true end
  end
  if type(v) == "string" then
    for k, x in pairs(string) do out[k] = x end
  else
    meta_names(v, out, 1)
  end
  if v == package.loaded.diloco then -- submodules load on first use: offer them anyway
    local ok, help = pcall(require, "diloco.help")
    if ok then
      for _, e in ipairs(help.walk()) do
        local sub = e.kind == "module" and e.name:match("^diloco%.([%w_]+)$")
        if sub and out[sub] == nil then out[sub] = package.loaded["diloco." .. sub] or {} end
      end
    end
  end
  return out
end

-- What follows a completed name: "(" for a function, "." for a table that is not
-- callable (a class, which is both, gets nothing).
local function suffix(x)
  if type(x) == "function" then return "(" end
  if type(x) == "table" then
    local mt = getmetatable(x)
    if not (type(mt) == "table" and rawget(mt, "__call")) then return "." end
  end
  return ""
end

local function complete(word, env)
  env = env or _G
  -- the expression before the cursor: names joined by '.' with an optional ':' last
  local path, sep, last = word:match("^([%a_][%w_%.]*)([%.:])([%w_]*)$")
  local candidates = {}
  if not path then
    local prefix = word:match("^([%a_][%w_]*)$") or (word == "" and "")
    if not prefix then return candidates end
    for k, x in pairs(members(env)) do
      if k:sub(1, #prefix) == prefix and k:match("^[%a_][%w_]*$") then
        candidates[#candidates + 1] = k .. suffix(x)
      end
    end
    for _, k in ipairs(KEYWORDS) do
      if k:sub(1, #prefix) == prefix then candidates[#candidates + 1] = k end
    end
  else
    local v = env
    for part in path:gmatch("[^%.]+") do
      local ok, x = pcall(function() return v[part] end)
      if not ok or x == nil then return candidates end
      v = x
    end
    for k, x in pairs(members(v)) do
      if k:sub(1, #last) == last and k:match("^[%a_][%w_]*$") and
          (sep == "." or type(x) == "function") and k:sub(1, 2) ~= "__" then
        candidates[#candidates + 1] = path .. sep .. k .. suffix(x)
      end
    end
  end
  table.sort(candidates)
  -- the same name reachable twice (a field and a method): keep one
  local uniq = {}
  for i, c in ipairs(candidates) do
    if c ~= candidates[i - 1] then uniq[#uniq + 1] = c end
  end
  return uniq
end

function M.complete(word, env)
  if type(word) ~= "string" then
    error("repl.complete: word must be a string, got " .. type(word), 2)
  end
  local ok, list = pcall(complete, word, env)
  return ok and list or {}
end

function M.setup(env)
  env = env or _G
  env.help = require "diloco.help"
  env.print = pretty.print
end

function M.show(...)
  if select("#", ...) == 0 then return end
  local parts = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    parts[i] = type(v) == "string" and v or pretty.format(v)
  end
  io.write(table.concat(parts, "\t"), "\n")
  io.flush()
end

return M
