-- Shared by the busted specs: approximate comparison of numbers and nested tables,
-- and capturing an expected error.  Load with `local H = require "spec.helpers"`
-- (specs run from the repository root).
local assert = require "luassert"
local H = {}

-- |a - b| <= tol * max(1, |a|, |b|)
function H.close(a, b, tol)
  return math.abs(a - b) <= (tol or 1e-5) * math.max(1, math.abs(a), math.abs(b))
end

-- Asserts that nested tables/numbers `got` and `want` agree elementwise.
function H.assert_near(want, got, tol, path)
  path = path or "x"
  if type(want) == "number" then
    assert.is_number(got, path)
    assert(H.close(want, got, tol), ("%s: expected %.7g, got %.7g"):format(path, want, got))
    return
  end
  assert.is_table(got, path)
  assert.are.equal(#want, #got, path .. ": length")
  for i = 1, #want do H.assert_near(want[i], got[i], tol, path .. "[" .. i .. "]") end
end

-- The error message of fn(...), which must fail.
function H.error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

-- Runs a shell command; returns its stdout and stderr together, and its exit status.
function H.sh(cmd)
  local p = io.popen(cmd .. " 2>&1 </dev/null; echo \"__status=$?\"")
  local out = p:read("a")
  p:close()
  local status = tonumber(out:match("__status=(%d+)%s*$"))
  return (out:gsub("__status=%d+%s*$", "")), status
end

-- A fresh scratch directory; write(name, text) -> its path inside; read_lines(path) ->
-- the lines of a file ({} if it does not exist); cleanup() removes it all.
function H.scratch()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  local S = { dir = dir }
  function S.write(name, text)
    local path = dir .. "/" .. name
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    return path
  end
  function S.cleanup() os.execute("rm -rf '" .. dir .. "'") end
  return S
end

function H.read_lines(path)
  local lines = {}
  local f = io.open(path)
  if not f then return lines end
  for l in f:lines() do lines[#lines + 1] = l end
  f:close()
  return lines
end

-- How many lines of a metrics file are events named `name` (the file may be mid-write).
function H.count_events(path, name)
  local n, pat = 0, '"event":"' .. name .. '"'
  for _, l in ipairs(H.read_lines(path)) do if l:find(pat, 1, true) then n = n + 1 end end
  return n
end

-- Waits for every pid (at most secs each, then kills them all, by pid, and raises);
-- their exit statuses, in order.
function H.wait_all(pids, secs)
  local codes = {}
  for i, pid in ipairs(pids) do
    local ok, err = pcall(H.await_or_kill, pid, secs, "exit of pid " .. pid, function()
      codes[i] = require("diloco").proc.wait(pid)
      return codes[i] ~= nil
    end)
    if not ok then
      for _, p in ipairs(pids) do
        pcall(require("diloco").proc.signal, p, "KILL")
        pcall(require("diloco").proc.wait, p, true)
      end
      error(err, 0)
    end
  end
  return codes
end

-- Waits, polling every 0.1 s, until ready() returns true, at most `secs`; if it never does
-- (or raises), kills the process `pid` (the test's own, by pid), reaps it and raises
-- "no WHAT within SECS s" (or ready's error).
function H.await_or_kill(pid, secs, what, ready)
  local diloco = require "diloco"
  local deadline = diloco.clock() + secs
  local ok, done = pcall(ready)
  while ok and not done and diloco.clock() < deadline do
    diloco.proc.sleep(0.1)
    ok, done = pcall(ready)
  end
  if ok and done then return end
  pcall(diloco.proc.signal, pid, "KILL")
  diloco.proc.wait(pid, true)
  error(ok and string.format("no %s within %g s", what, secs) or done, 0)
end

-- The fields of t as Lua text, in key order: "a = 1, b = \"x\"".
local function fields_text(t)
  local keys, out = {}, {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = string.format("%s = %q", k, t[k]) end
  return table.concat(out, ", ")
end

-- A recipe file of a tiny GPT on the fortunes (seconds per run), for the specs that start
-- real learners and syncers, as name.lua in scratch directory S; returns its path.
-- o: count (islands, 2), sync (the sync fields, { preset = "decoupled", H = 8,
-- fragments = 2, tau = 1 } unless given), steps (200), runtime (fields over heartbeat
-- 0.5 s, timeout 3 s, drain 10 s), eval (the eval fields, none: the recipe's defaults),
-- chaos (Lua text, nil), islands (islands fields beside count: { syncers = 2, standbys = true }).
function H.tiny_recipe(S, name, o)
  o = o or {}
  local rt = { heartbeat = "0.5s", timeout = "3s", drain = "10s" }
  for k, v in pairs(o.runtime or {}) do rt[k] = v end
  local sync = o.sync or { preset = "decoupled", H = 8, fragments = 2, tau = 1 }
  local eval = o.eval and string.format("\n  eval = { %s },", fields_text(o.eval)) or ""
  local isl = o.islands and ", " .. fields_text(o.islands) or ""
  return S.write(name .. ".lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = %q,
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 16, batch = 8 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { %s },
  islands = { count = %d%s },
  runtime = { %s },
  steps = %d,%s
  chaos = %s,
}
]], name, fields_text(sync), o.count or 2, isl, fields_text(rt), o.steps or 200, eval, o.chaos or "nil"))
end

-- The JSON objects of a metrics file, one per line, in order.
function H.events(path)
  local json_decode = require("diloco").json_decode
  local list = {}
  for _, line in ipairs(H.read_lines(path)) do list[#list + 1] = json_decode(line) end
  return list
end

-- The events of `list` named `event` (and of `kind`, when given), in order.
function H.of_kind(list, event, kind)
  local out = {}
  for _, e in ipairs(list) do
    if e.event == event and (kind == nil or e.kind == kind) then out[#out + 1] = e end
  end
  return out
end

-- A recipe of text `text` that `exe sim` refuses, as name.lua in scratch directory S: its
-- exit status 2 and every string of `wants` in what it said.
function H.sim_refuses(exe, S, name, text, wants)
  local path = S.write(name .. ".lua", text)
  local out, code = H.sh(string.format("%s sim %s --out %s/%s --quiet 2>&1", exe, path, S.dir, name))
  assert.are.equal(2, code, out)
  for _, w in ipairs(wants) do assert.matches(w, out, 1, true) end
end

-- The takeovers on a run's tape: its standbys' fault records that carry the epoch they took
-- over with (docs/shards.md, "Standbys"), in order.
function H.takeovers(list)
  local out = {}
  for _, e in ipairs(H.of_kind(list, "fault", "standby")) do
    if e.epoch then out[#out + 1] = e end
  end
  return out
end

-- The last event of `list`, asserted to be the run's summary.
function H.summary_of(list)
  local s = list[#list]
  assert.are.equal("summary", s.event)
  return s
end

-- Whether two {name = tensor} tables (diloco.load_safetensors) hold the same tensors bit
-- for bit: true, or false and the first difference.
function H.same_model(a, b)
  local function flat(t, out)
    out = out or {}
    if type(t) ~= "table" then
      out[#out + 1] = t
      return out
    end
    for _, v in ipairs(t) do flat(v, out) end
    return out
  end
  for name, x in pairs(a) do
    local y = b[name]
    if not y then return false, "no tensor " .. name end
    local u, v = flat(x:tolist()), flat(y:tolist())
    if #u ~= #v then return false, name .. ": sizes differ" end
    for i = 1, #u do
      if u[i] ~= v[i] then return false, string.format("%s[%d]: %.9g vs %.9g", name, i, u[i], v[i]) end
    end
  end
  for name in pairs(b) do
    if not a[name] then return false, "no tensor " .. name end
  end
  return true
end

-- A metrics file of records { event, fields... } written the way runs write them (one
-- diloco.metrics line each), as name in scratch directory S; returns its path.
function H.metrics_file(S, name, records)
  local diloco = require "diloco"
  local lines = {}
  for i, r in ipairs(records) do
    local fields = {}
    for k, v in pairs(r) do
      if k ~= 1 then fields[k] = v end
    end
    lines[#lines + 1] = diloco.metrics.line(r[1], fields, 1000 + i)
  end
  return S.write(name, table.concat(lines, "\n") .. "\n")
end

return H
