-- Hostile input to `diloco-lua run` and `sample` (issue 7, "Validation never crashes,
-- and bounds what it allocates"): every bad recipe value, option or model file gets a
-- message naming the field and what is allowed, exit 2 (bad options) or 1 (a bad
-- file), never a Lua traceback or an internal file:line; nothing is allocated beyond
-- the machine's memory on the strength of a number in a recipe or a file.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")

local function q(s) -- single-quote for /bin/sh
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1 </dev/null; echo \"__status=$?\"")
  local out = p:read("a")
  p:close()
  local status = tonumber(out:match("__status=(%d+)%s*$"))
  return out:gsub("__status=%d+%s*$", ""), status
end

local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

local function write(name, text)
  local path = tmp .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

local TINY = write("tiny.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  steps = 2, eval = { every = 0, batches = 1 },
}
]])

-- `run` of the tiny recipe with flags (a shell fragment); it must fail validation.
local function run(flags)
  return sh(string.format("%s run %s --out %s/out --quiet %s", exe, TINY, tmp, flags))
end

-- No Lua traceback and no position in our own code.
local function assert_clean(out)
  assert.is_nil(out:find("stack traceback", 1, true), out)
  assert.is_nil(out:find("%.lua:%d+:"), out)
end

local function assert_refused(flags, want, code)
  local out, status = run(flags)
  assert.are.equal(code or 2, status, flags .. "\n" .. out)
  assert.matches(want, out, 1, true)
  assert_clean(out)
  return out
end

describe("diloco-lua option parsing", function()
  it("refuses a value given to a flag", function()
    assert_refused("--quiet=yes", "option '--quiet' takes no value (got '--quiet=yes')")
  end)
  it("prints a traceback only with --debug", function()
    -- a hook that fails with a plain Lua error: an internal error, not a recipe problem
    local path = write("boom.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  steps = 2, eval = { every = 0, batches = 1 },
  hooks = { on_step = function() local t = nil; return t.x end },
}
]])
    local out, status = sh(string.format("%s run %s --out %s/boom --quiet", exe, path, tmp))
    assert.are.equal(1, status, out)
    assert.is_nil(out:find("stack traceback", 1, true), out)
    local dout, dstatus = sh(string.format("%s run %s --out %s/boom2 --quiet --debug", exe, path, tmp))
    assert.are.equal(1, dstatus, dout)
    assert.matches("stack traceback", dout, 1, true)
  end)
end)

describe("diloco-lua sample options", function()
  it("refuses an empty prompt before reading the file", function()
    local out, status = sh(exe .. " sample " .. tmp .. "/none.safetensors --prompt ''")
    assert.are.equal(2, status, out)
    assert.matches('--prompt "": expected a non-empty text', out, 1, true)
    assert_clean(out)
  end)
end)
