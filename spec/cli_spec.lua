-- The diloco-lua executable, run as a child process: options, `arg`, exit statuses
-- and the error format of the CLI contract (architecture.md).  ctest sets DILOCO_LUA.

local exe = os.getenv("DILOCO_LUA")

local function q(s) -- single-quote for /bin/sh
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local temps = {}
local function tempfile(contents)
  local name = os.tmpname()
  local f = assert(io.open(name, "wb"))
  f:write(contents)
  f:close()
  temps[#temps + 1] = name
  return name
end

-- Runs diloco-lua with `args` (a shell fragment); stdin is `input` or /dev/null, so a
-- terminal never starts the REPL.  Returns stdout+stderr and the exit status.
local function run(args, input)
  local stdin = input and q(tempfile(input)) or "/dev/null"
  local p = assert(io.popen(q(exe) .. " " .. args .. " < " .. stdin .. " 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

describe("diloco-lua", function()
  setup(function()
    assert(exe, "set DILOCO_LUA to the built diloco-lua executable")
  end)

  after_each(function()
    for _, name in ipairs(temps) do os.remove(name) end
    temps = {}
  end)

  it("runs a script with its arguments in `...` and `arg`", function()
    local script = tempfile([[
      print("n", select("#", ...), ...)
      print("arg", arg[0] == SCRIPT, arg[1], arg[2], #arg, arg[-1] ~= nil)
    ]])
    local out, code = run("-e " .. q("SCRIPT = " .. string.format("%q", script)) .. " "
      .. q(script) .. " a 'b c'")
    assert.are.equal(0, code)
    assert.are.equal("n\t2\ta\tb c\narg\ttrue\ta\tb c\t2\ttrue\n", out)
  end)

  it("runs repeated -e chunks in order, then the script", function()
    local script = tempfile("print('script', x)")
    local out, code = run("-e 'x = 1' -e 'x = x * 10; print(x)' " .. q(script))
    assert.are.equal(0, code)
    assert.are.equal("10\nscript\t10\n", out)
  end)

  it("prints its version with -v and --version, then where its Lua files come from", function()
    for _, opt in ipairs({ "-v", "--version" }) do
      local out, code = run(opt)
      assert.are.equal(0, code)
      -- a build-tree executable runs the source tree's lua/ (the one busted loads too)
      local dir = out:match("^diloco%-lua 0%.1%.0 %(libdiloco %d+%.%d+%.%d+, Lua 5%.4%.%d+, "
        .. "gemm %l+, %d+ threads%)\nlua files: (/[^\n]*) %(build tree: the source's lua/%)\n$")
      assert.truthy(dir, out)
      local f = io.open(dir .. "/diloco/cli.lua")
      assert.truthy(f, dir)
      f:close()
    end
  end)

  it("takes the matrix-product backend from DILOCO_GEMM and refuses unknown ones", function()
    local p = assert(io.popen("DILOCO_GEMM=openblas OPENBLAS_NUM_THREADS=1 " .. q(exe)
      .. " -v -e 'print(diloco.gemm_backend(), diloco.num_threads())' 2>&1 </dev/null"))
    local out = p:read("a")
    p:close()
    assert.matches("gemm openblas, 1 threads", out, 1, true)
    assert.matches("\nopenblas\t1\n", out, 1, true)
    p = assert(io.popen("DILOCO_GEMM=mkl " .. q(exe) .. " -v 2>&1 </dev/null"))
    out = p:read("a")
    local _, _, code = p:close()
    assert.are.equal(2, code)
    assert.matches('diloco-lua: DILOCO_GEMM: gemm backend "mkl": expected "openblas" or "onednn"', out, 1, true)
    out = run([[-e 'print(pcall(diloco.gemm_backend, "blis"))']])
    assert.matches('false\t.*gemm backend "blis": expected "openblas" or "onednn"', out)
    out = run([[-e 'diloco.gemm_backend("openblas") print(diloco.gemm_backend())']])
    assert.are.equal("openblas\n", out)
  end)

  it("prints usage with --help, listing the options and the subcommands", function()
    local out, code = run("--help")
    assert.are.equal(0, code)
    for _, word in ipairs({ "-e", "-i", "--version", "--help", "run", "sim", "syncer",
                            "learner", "goodput" }) do
      assert.truthy(out:find(word, 1, true), word)
    end
  end)

  it("reports a runtime error with a traceback and exits 1", function()
    local script = tempfile("local function f() error('boom') end\nf()\n")
    local out, code = run(q(script))
    assert.are.equal(1, code)
    assert.truthy(out:find("diloco-lua: " .. script .. ":1: boom", 1, true), out)
    assert.truthy(out:find("stack traceback", 1, true), out)
  end)

  it("reports an error object through its __tostring", function()
    local out, code = run([[-e 'error(setmetatable({}, {__tostring = function() return "custom" end}))']])
    assert.are.equal(1, code)
    assert.truthy(out:find("diloco-lua: custom", 1, true), out)
    assert.truthy(out:find("stack traceback", 1, true), out)
  end)

  it("reports a syntax error with a traceback and exits 1", function()
    local script = tempfile("x = = 1\n")
    local out, code = run(q(script))
    assert.are.equal(1, code)
    assert.truthy(out:find("diloco-lua: " .. script .. ":1: unexpected symbol near '='", 1, true),
      out)
    assert.truthy(out:find("stack traceback", 1, true), out)
  end)

  it("names a missing script and exits 1", function()
    local out, code = run("/nonexistent/dir/missing.lua")
    assert.are.equal(1, code)
    assert.truthy(out:find("diloco-lua: cannot open /nonexistent/dir/missing.lua", 1, true), out)
  end)

  it("syncer and learner refuse a missing recipe, a learner a missing --connect and secret, with status 2", function()
    for _, cmd in ipairs({ "syncer", "learner" }) do
      local out, code = run(cmd)
      assert.are.equal(2, code, cmd)
      assert.truthy(out:find("diloco-lua: " .. cmd .. ": missing RECIPE", 1, true), out)
    end
    local out, code = run("learner recipes/charlm.lua")
    assert.are.equal(2, code, out)
    assert.truthy(out:find("--connect HOST:PORT (or @FILE) is required", 1, true), out)
    out, code = run("learner recipes/charlm.lua --connect 127.0.0.1:1 --id 0")
    assert.are.equal(2, code, out)
    assert.truthy(out:find("--id 0: expected an integer in [1, 65536]", 1, true), out)
    local empty = os.tmpname()
    os.remove(empty)
    out, code = run("syncer recipes/charlm.lua --resume --out " .. empty)
    os.execute("rm -rf '" .. empty .. "'")
    assert.are.equal(2, code, out)
    assert.truthy(out:find("/syncer holds no checkpoint", 1, true), out)
    out, code = run("learner recipes/charlm.lua --connect 127.0.0.1:1")
    assert.are.equal(2, code, out)
    assert.truthy(out:find("no secret: give --secret-file FILE or set DILOCO_SECRET", 1, true), out)
  end)

  it("rejects an unknown option or a missing -e argument with status 2", function()
    local out, code = run("--bogus")
    assert.are.equal(2, code)
    assert.truthy(out:find("--bogus", 1, true), out)
    assert.truthy(out:find("usage:", 1, true), out)
    out, code = run("-e")
    assert.are.equal(2, code)
    assert.truthy(out:find("'-e'", 1, true), out)
  end)

  it("runs a chunk piped on stdin, with no arguments or with `-`", function()
    local out, code = run("", "print(1 + 1)")
    assert.are.equal(0, code)
    assert.are.equal("2\n", out)
    out, code = run("- x y", "print(arg[0], ...)")
    assert.are.equal(0, code)
    assert.are.equal("-\tx\ty\n", out)
  end)

  it("exits 1 when the stdin chunk fails", function()
    local out, code = run("", "error('from stdin')")
    assert.are.equal(1, code)
    assert.truthy(out:find("diloco-lua: stdin:1: from stdin", 1, true), out)
  end)

  it("loads the diloco module for require and as a global", function()
    local script = tempfile("local d = require 'diloco'\nprint(type(d), d == diloco)\n")
    local out, code = run(q(script))
    assert.are.equal(0, code)
    assert.are.equal("table\ttrue\n", out)
  end)

  it("looks for Lua modules in the source tree first", function()
    local out, code = run([[-e 'print((package.path:match("^[^;]*")))']])
    assert.are.equal(0, code)
    assert.truthy(out:match("/lua/%?%.lua\n$"), out)
  end)

  it("runs a REPL session from a pipe with -i", function()
    local out, code = run("-i", table.concat({
      "1 + 2, 'x'",
      "function sq(x)",
      "  return x * x",
      "end",
      "sq(7)",
      "error('oops')",
      "=sq(3)",
    }, "\n") .. "\n")
    assert.are.equal(0, code)
    assert.truthy(out:find("3\tx\n", 1, true), out)
    assert.truthy(out:find(">> >> > 49\n", 1, true), out) -- continuation prompts, then the value
    assert.truthy(out:find("stdin:1: oops", 1, true), out) -- an error does not end the session
    assert.truthy(out:find("> 9\n", 1, true), out)
  end)
end)
