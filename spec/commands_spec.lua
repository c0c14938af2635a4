-- Issue 11, "One consistent CLI": every --help generated from one option table per
-- command (diloco.cli's M.commands), the same exit statuses everywhere (2 usage or
-- recipe error, 1 a failed run, 130 an interrupt), unknown commands named with the
-- list of commands, numbers in messages as the user wrote them.  ctest sets DILOCO_LUA.
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
local H = require "spec.helpers"

local function q(s) -- single-quote for /bin/sh
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- diloco-lua with args (a shell fragment), stdin from /dev/null: output and status.
local function run(args) return H.sh(q(exe) .. " " .. args) end

-- Issue 11, "One consistent CLI": every --help from one option table per command,
-- the same exit statuses everywhere, unknown commands named, numbers as written.
describe("one consistent CLI", function()
  local cli = require "diloco.cli"
  local scratch = H.scratch()
  teardown(scratch.cleanup)

  local function squash(s) return (s:gsub("%s+", " ")) end

  -- The help's entry of option o: its flag, then its description and its default.
  local function entry(o)
    local flag = o.name:sub(1, 1) == "-" and o.name or "--" .. o.name
    if o.arg then flag = flag .. " " .. o.arg end
    local d = cli.default_text(o)
    return flag, squash(o.doc:gsub("; repeatable$", "")), d and "(default: " .. squash(d) .. ")"
  end

  it("lists every option of every command in its --help, with its description and default", function()
    local checked = 0
    for _, c in ipairs(cli.commands) do
      if c.available ~= false then
        local out, code = run(c.name .. " --help")
        assert.are.equal(0, code, c.name)
        local text = squash(out)
        for _, o in ipairs(c.options) do
          local flag, doc, default = entry(o)
          local at = text:find(" " .. flag .. " " .. doc, 1, true)
          assert(at, string.format("%s --help: no '%s %s' in\n%s", c.name, flag, doc, out))
          if default then
            assert(text:find(default, at, true), string.format("%s --help: %s has no %s", c.name, flag, default))
          end
          checked = checked + 1
        end
        -- a value option always states its default; the exit statuses are there too
        for _, o in ipairs(c.options) do
          if o.arg then assert(cli.default_text(o), c.name .. " --" .. o.name .. " states no default") end
        end
        assert.matches("Exit status: 0 ", out, 1, true)
      end
    end
    assert(checked >= 30, checked)
  end)

  it("sample --help describes each option and its default (it once listed only the names)", function()
    local out, code = run("sample --help")
    assert.are.equal(0, code)
    local text = squash(out)
    for _, want in ipairs({ "--tokens N bytes to generate (default: 200) [integer in 1..1000000]",
      "--temperature T softmax temperature (0 = greedy) (default: 0.8)", "--seed S random seed (default: 0)",
      '--prompt TEXT the text the model continues (not empty) (default: "\\n")', "--top-k K" }) do
      assert(text:find(want, 1, true), want .. "\n" .. out)
    end
  end)

  it("exits 2 for a missing model file in sample, as for a missing recipe in run", function()
    local out, code = run("sample " .. scratch.dir .. "/missing.safetensors")
    assert.are.equal(2, code, out)
    assert.matches("missing.safetensors: No such file or directory (expected a model.safetensors", out, 1, true)
    out, code = run("run " .. scratch.dir .. "/missing.lua")
    assert.are.equal(2, code, out)
  end)

  it("exits 2 for a bad model.heads, a recipe error", function()
    local recipe = scratch.write("heads.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 }, steps = 2,
}
]])
    for _, cmd in ipairs({ "run", "sim" }) do
      local out, code = run(string.format("%s %s --out %s/o --set model.heads=3", cmd, recipe, scratch.dir))
      assert.are.equal(2, code, out)
      assert.matches("model: GPT: heads = 3 does not divide dim = 16", out, 1, true)
    end
  end)

  it("prints integer ranges as integers and numbers as the user wrote them", function()
    local out, code = run("sample x.safetensors --seed -1")
    assert.are.equal(2, code)
    assert.matches("--seed -1: expected an integer in [0, 9007199254740992]", out, 1, true)
    out = run("sample x.safetensors --tokens 1e7")
    assert.matches("--tokens 1e7: expected an integer in [1, 1000000]", out, 1, true)
    assert.is_nil(out:find("1000000.0", 1, true), out)
    local recipe = scratch.write("r.lua", "return require('diloco').recipe { data = { kind = 'synthetic_text' } }")
    out, code = run(string.format("run %s --out %s/o --set steps=1e13 --set inner.lr=-1e-3", recipe, scratch.dir))
    assert.are.equal(2, code, out)
    assert.matches("steps = 1e13: expected an integer in [1, 1000000000000]", out, 1, true)
    assert.matches("inner.lr = -1e-3: expected a finite number >= 0", out, 1, true)
  end)
end)

describe("the top level", function()
  local cli = require "diloco.cli"

  it("--help lists the interpreter's options and every option of every command", function()
    for _, opt in ipairs({ "--help", "-h" }) do
      local out, code = run(opt)
      assert.are.equal(0, code, out)
      for _, o in ipairs(cli.toplevel.options) do
        assert(out:find("\n  " .. o.name .. (o.arg and " " .. o.arg or ""), 1, true), o.name .. "\n" .. out)
      end
      for _, c in ipairs(cli.commands) do
        assert(out:find("\n  " .. c.name .. " ", 1, true), c.name)
        if c.available ~= false then
          for _, o in ipairs(c.options) do
            assert(out:find("[--" .. o.name .. (o.arg and " " .. o.arg or "") .. "]", 1, true),
              c.name .. " --" .. o.name .. " missing from\n" .. out)
          end
        end
      end
      assert.matches("130 Ctrl-C", out, 1, true)
    end
  end)

  it("exits 1 when --quiet cannot write the summary to stdout, saying where it is (sim and run)", function()
    local scratch = H.scratch()
    finally(scratch.cleanup)
    local path = scratch.write("tiny.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2, tied = true },
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 16, batch = 4 },
  islands = { count = 2 }, steps = 4, eval = { every = 0, batches = 1 },
}]])
    for i, cmd in ipairs { "sim " .. q(path), "run " .. q(path) .. " --set islands.count=1" } do
      local errf, dir = scratch.dir .. "/err.txt", scratch.dir .. "/full" .. i
      local _, code = H.sh(string.format("(%s %s --out %s --quiet >/dev/full 2>%s)", q(exe), cmd, q(dir), q(errf)))
      local ef = assert(io.open(errf))
      local out = ef:read("a")
      ef:close()
      assert.are.equal(1, code, out)
      assert.matches("writing the summary to stdout: No space left on device (the run is saved; its summary is the "
        .. "last line of " .. dir .. "/metrics.jsonl)", out, 1, true)
      local f = assert(io.open(dir .. "/metrics.jsonl"))
      assert.matches('"event":"summary"', f:read("a"), 1, true)
      f:close()
    end
  end)

  it("names an unknown command, lists the commands and exits 2 (it once said 'cannot open frobnicate')", function()
    local out, code = run("frobnicate --fast")
    assert.are.equal(2, code, out)
    assert.matches("diloco-lua: unknown command 'frobnicate' (and no file of that name to run as a script); the "
      .. "commands are run, sim, sample, goodput, plot, compare, syncer, learner; diloco-lua --help lists them", out, 1, true)
    assert.is_nil(out:find("cannot open", 1, true), out)
  end)

  it("still runs a script whose name looks like a command word, and still says 'cannot open' for a path", function()
    local scratch = H.scratch()
    scratch.write("hello", "print('hi from', arg[0], ...)")
    local out, code = H.sh("cd " .. q(scratch.dir) .. " && " .. q(exe) .. " hello a b")
    scratch.cleanup()
    assert.are.equal(0, code, out)
    assert.are.equal("hi from\thello\ta\tb\n", out)
    out, code = run("/nonexistent/frobnicate.lua")
    assert.are.equal(1, code, out)
    assert.matches("cannot open /nonexistent/frobnicate.lua", out, 1, true)
  end)
end)
