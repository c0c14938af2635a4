-- diloco.help: the one docstring registry of the diloco module, its submodules and
-- its types.  help(x) in the REPL (and diloco.help(x) anywhere) prints the entry of
-- a function, type, module or object of diloco, given as the value or as its name.
--
--   help()                      what there is, and how to ask
--   help(diloco.zeros)          help("zeros"), help("diloco.zeros"): one function
--   help(t) / help(t.add)       a Tensor (its type) / one of its methods
--   help(diloco.nn.GPT)         a class; help(model) for an instance of it
--   M.text(x) -> text | nil, message     the same text, or why there is none
--   M.name_of(v) -> "diloco.zeros" | nil the registry's name of a value
--   M.walk() -> { {name =, value =, kind =}, ... }   every public function, type and
--                 module, found by walking the module (the registry must cover them all:
--                 spec/help_spec.lua)
--   M.missing(), M.stale()      walked names without an entry; entries naming nothing
--   M.refresh()                 forget the walk (after functions were added or removed)
--   help("run"), help("sim"), ...   a command of diloco-lua: its --help text, from the
--                 same option tables as `diloco-lua COMMAND --help` (diloco.cli.commands)
--
-- Names: "diloco.X" for the module's fields, "diloco.MOD.X" for a submodule's
-- (lua/diloco/MOD.lua), "Tensor:X" for a method of a userdata type, "diloco.nn.Class:X"
-- for a class's method.  A Tensor method that is also diloco.X (every op) shares
-- diloco.X's entry; a class method that overrides nn.Module's shares the Module's.
local M = {}

local D = require "diloco.help.docs" -- name -> text

-- Userdata types: the registry name of their metatable -> the name they are known by.
local TYPES = {
  ["diloco.Tensor"] = "Tensor", ["diloco.Generator"] = "Generator", ["diloco.Params"] = "Params",
  ["diloco.Optimizer"] = "Optimizer", ["diloco.Plan"] = "Plan", ["diloco.Chaos"] = "Chaos",
  ["diloco.VTime"] = "VTime", ["diloco.TextData"] = "TextData", ["diloco.ImageData"] = "ImageData",
  ["diloco.Loader"] = "Loader", ["diloco.Lock"] = "Lock", ["diloco.Net"] = "Net",
  ["diloco.Syncer"] = "Syncer", ["diloco.Learner"] = "Learner", ["diloco.Account"] = "Account", ["diloco.Supervisor"] = "Supervisor",
}

-- The submodules are the files lua/diloco/*.lua next to this one: a new file is
-- walked (and must be documented) without a change here.
local function submodule_names()
  local here = package.searchpath("diloco.help", package.path)
  local dir = here and here:match("^(.*)/help%.lua$") or here and here:match("^(.*)/help/init%.lua$")
  local names = {}
  if dir then
    for _, f in ipairs(require("diloco").listdir(dir) or {}) do
      local n = f:match("^([%w_]+)%.lua$")
      if n then names[#names + 1] = n end
    end
  end
  table.sort(names)
  return names
end

-- The methods table of a userdata type: the __index table, or the methods upvalue of
-- an __index function (the types whose __index also serves properties).
local function methods_of(mt)
  local idx = mt.__index
  if type(idx) == "table" then return idx end
  if type(idx) == "function" then
    for i = 1, 4 do
      local _, up = debug.getupvalue(idx, i)
      if type(up) == "table" and type(rawget(up, "close")) == "function" then return up end
    end
  end
  return nil
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  return keys
end

local function is_class(v)
  return type(v) == "table" and type(rawget(v, "__name")) == "string" and rawget(v, "__index") ~= nil
end

local cache

function M.walk()
  if cache then return cache end
  local diloco = require "diloco"
  local list, seen = {}, {}
  local function add(name, value, kind)
    list[#list + 1] = { name = name, value = value, kind = kind }
  end
  add("diloco", diloco, "module")
  for _, k in ipairs(sorted_keys(diloco)) do
    local v = rawget(diloco, k)
    if k:sub(1, 1) ~= "_" and type(v) == "function" then add("diloco." .. k, v, "function") end
  end
  -- tables of functions that the C side puts in the module (lua/lnet.c: diloco.net): each
  -- is walked as a module with its functions, found without a list to keep up to date
  for _, k in ipairs(sorted_keys(diloco)) do
    local v = rawget(diloco, k)
    if k:sub(1, 1) ~= "_" and type(v) == "table" and k ~= "Tensor" then
      local fns = {}
      for _, fk in ipairs(sorted_keys(v)) do
        if fk:sub(1, 1) ~= "_" and type(rawget(v, fk)) == "function" then fns[#fns + 1] = fk end
      end
      if #fns > 0 then
        seen[v] = true
        add("diloco." .. k, v, "module")
        for _, fk in ipairs(fns) do add("diloco." .. k .. "." .. fk, rawget(v, fk), "function") end
      end
    end
  end
  local reg = debug.getregistry()
  for _, tname in ipairs(sorted_keys(TYPES)) do
    local short = TYPES[tname]
    local mt = reg[tname]
    if type(mt) == "table" then
      add(short, mt, "type")
      local methods = methods_of(mt) or {}
      for _, k in ipairs(sorted_keys(methods)) do
        if k:sub(1, 1) ~= "_" and type(methods[k]) == "function" then
          add(short .. ":" .. k, methods[k], "method")
        end
      end
    end
  end
  for _, mod in ipairs(submodule_names()) do
    local ok, m = pcall(require, "diloco." .. mod)
    if ok and type(m) == "table" and not seen[m] then
      local mname = "diloco." .. mod
      add(mname, m, "module")
      seen[m] = true
      for _, k in ipairs(sorted_keys(m)) do
        local v = rawget(m, k)
        if k:sub(1, 1) ~= "_" then
          if type(v) == "function" then
            add(mname .. "." .. k, v, "function")
          elseif is_class(v) and not seen[v] then
            seen[v] = true
            add(mname .. "." .. k, v, "class")
            for _, mk in ipairs(sorted_keys(v)) do
              if mk:sub(1, 1) ~= "_" and type(rawget(v, mk)) == "function" then
                add(mname .. "." .. k .. ":" .. mk, rawget(v, mk), "method")
              end
            end
          end
        end
      end
    elseif ok and type(m) == "function" then
      add("diloco." .. mod, m, "module")
    end
  end
  cache = list
  return list
end

-- The entry that documents a walked name: its own, or the one it shares.
local function entry_of(name)
  if D[name] then return name end
  local ty, method = name:match("^(%u[%w_]*):([%w_]+)$")
  if ty and D["diloco." .. method] then return "diloco." .. method end -- t:add = diloco.add
  local mod, class, m2 = name:match("^(diloco%.[%w_]+)%.([%w_]+):([%w_]+)$")
  if mod and D[mod .. ".Module:" .. m2] then return mod .. ".Module:" .. m2 end
  return nil
end

function M.missing()
  local out = {}
  for _, e in ipairs(M.walk()) do
    if not entry_of(e.name) then out[#out + 1] = e.name end
  end
  return out
end

function M.stale()
  local names = {}
  for _, e in ipairs(M.walk()) do names[e.name] = true end
  local out = {}
  for _, k in ipairs(sorted_keys(D)) do
    if not names[k] then out[#out + 1] = k end
  end
  return out
end

local by_value

function M.refresh()
  cache, by_value = nil, nil
end

local function index()
  if by_value then return by_value end
  by_value = {}
  for _, e in ipairs(M.walk()) do
    if by_value[e.value] == nil then by_value[e.value] = e.name end
  end
  return by_value
end

function M.name_of(v)
  if v == nil then return nil end
  return index()[v]
end

-- A name the user typed: "zeros", "diloco.zeros", "nn.GPT", "Tensor:add", "t:add".
local function resolve_name(s)
  local candidates = { s, "diloco." .. s }
  local short = s:match("^diloco%.(%u[%w_]*)$")
  if short then candidates[#candidates + 1] = short end
  local ty, m = s:match("^(%u[%w_]*)[%.:]([%w_]+)$")
  if ty then candidates[#candidates + 1] = ty .. ":" .. m end
  local cls, m2 = s:match("^(.+%.%u[%w_]*)[%.:]([%w_]+)$")
  if cls then
    candidates[#candidates + 1] = cls .. ":" .. m2
    candidates[#candidates + 1] = "diloco." .. cls .. ":" .. m2
  end
  local walked = {}
  for _, e in ipairs(M.walk()) do walked[e.name] = true end
  for _, c in ipairs(candidates) do
    if walked[c] and entry_of(c) then return c end
  end
  return nil
end

local KIND_TITLE = { module = "module", ["function"] = "function", type = "type", class = "class",
  method = "method" }

local function render(name)
  local kind
  for _, e in ipairs(M.walk()) do if e.name == name then kind = e.kind break end end
  local key = entry_of(name)
  local text = D[key]
  local head = name .. "  (" .. (KIND_TITLE[kind] or "entry") .. ")"
  if key ~= name then head = head .. ", documented as " .. key end
  local body = { head, text }
  if kind == "module" or kind == "type" or kind == "class" then
    -- what is inside, so help(module) leads to help(member)
    local members = {}
    local prefix = name .. (kind == "module" and "." or ":")
    for _, e in ipairs(M.walk()) do
      if e.name:sub(1, #prefix) == prefix and not e.name:sub(#prefix + 1):find("[%.:]") then
        members[#members + 1] = e.name:sub(#prefix + 1)
      end
    end
    if #members > 0 then
      body[#body + 1] = (kind == "module" and "Members: " or "Methods: ") .. table.concat(members, " ")
    end
  end
  return table.concat(body, "\n")
end

-- The diloco-lua commands, from diloco.cli's option tables (nil if it has none).
local function commands()
  local ok, cli = pcall(require, "diloco.cli")
  if ok and type(cli) == "table" and type(cli.commands) == "table" then return cli end
  return nil
end

local function command_text(name)
  local cli = commands()
  local c = cli and cli.commands[name]
  if type(c) ~= "table" then return nil end
  if type(cli.command_help) == "function" then
    local ok, text = pcall(cli.command_help, name)
    if ok and type(text) == "string" then return text end
  end
  return "diloco-lua " .. name .. " " .. (c.args or "") .. "\n" .. (c.summary or "")
end

local function command_names()
  local cli = commands()
  local names = {}
  for _, c in ipairs(cli and cli.commands or {}) do
    if type(c) == "table" and c.name and c.available ~= false then names[#names + 1] = c.name end
  end
  return #names > 0 and table.concat(names, " ") or "see diloco-lua --help"
end

local function overview()
  local mods, types = {}, {}
  for _, e in ipairs(M.walk()) do
    if e.kind == "module" then mods[#mods + 1] = e.name end
    if e.kind == "type" then types[#types + 1] = e.name end
  end
  return table.concat({
    "help(x): the entry of a function, type, module or object of diloco, e.g.",
    "  help(diloco.zeros)   help(\"zeros\")   help(t)   help(t.matmul)   help(diloco.nn.GPT)",
    "Modules: " .. table.concat(mods, " "),
    "Types: " .. table.concat(types, " "),
    "Commands: " .. command_names() .. "  (help(\"run\") = diloco-lua run --help)",
  }, "\n")
end

-- Lua's own globals and libraries are named as such: "print (Lua's)".
local function lua_name(v)
  for k, x in pairs(_G) do
    if x == v and type(k) == "string" then return k end
    if type(x) == "table" and x ~= _G and k ~= "package" and k ~= "diloco" then
      for k2, y in pairs(x) do
        if y == v and type(k2) == "string" then return k .. "." .. k2 end
      end
    end
  end
end

local function describe(v)
  local name = (type(v) == "function" or type(v) == "table") and lua_name(v)
  if name then return name .. " is part of Lua (the Lua 5.4 manual), not of diloco" end
  return tostring(v) .. " (a " .. type(v) .. ") is not a function, type or module of diloco"
end

function M.text(...)
  if select("#", ...) == 0 then return overview() end
  local x = ...
  if type(x) == "string" then
    -- a bare command name is the command ("sim"); "diloco.sim" is the module
    local cmd = command_text(x)
    if cmd then
      local mod = resolve_name("diloco." .. x)
      return mod and cmd .. "\n(the Lua module: help(\"" .. mod .. "\"))" or cmd
    end
    local name = resolve_name(x)
    if name then return render(name) end
    return nil, ("help: no entry for %q: it is not a function, type or module of diloco " ..
      "(help() lists them)"):format(x)
  end
  local name = M.name_of(x)
  if name then return render(name) end
  if type(x) == "userdata" then -- an object: its type
    local mt = getmetatable(x)
    local tname = type(mt) == "table" and rawget(mt, "__name")
    if tname and TYPES[tname] then return render(TYPES[tname]) end
  elseif type(x) == "table" then -- an instance of an nn class: its class
    local mt = getmetatable(x)
    local cname = mt and M.name_of(mt)
    if cname then return render(cname) end
  end
  return nil, "help: " .. describe(x) .. " (help() lists what diloco has)"
end

-- text with every line longer than width broken at spaces, the continuation lines
-- indented by two (a line with no space to break at stays as it is).
function M.wrap(text, width)
  local out = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do
    local indent = ""
    while #line > width do
      local cut = line:sub(1, width + 1):match("^.*() ")
      if not cut or cut <= #indent + 1 then break end
      out[#out + 1] = line:sub(1, cut - 1)
      indent = "  "
      line = indent .. line:sub(cut + 1)
    end
    out[#out + 1] = line
  end
  return table.concat(out, "\n")
end

function M.help(...)
  local text, err = M.text(...)
  -- to the terminal's width (80 when stdout is not a terminal)
  local d = package.loaded.diloco
  local width = type(d) == "table" and d.terminal_size and d.terminal_size(1) or nil
  io.write(M.wrap(text or err, math.max(20, width or 80)), "\n")
end

return setmetatable(M, { __call = function(_, ...) return M.help(...) end })
