-- The REPL: the pretty printer (diloco.pretty), tab completion (diloco.repl.complete)
-- called directly, and diloco-lua's REPL end to end, piped (-i) and on a
-- pseudo-terminal (script(1)) for completion and history.
local diloco = require "diloco"
local H = require "spec.helpers"
local pretty = require "diloco.pretty"
local repl = require "diloco.repl"

local LUA = os.getenv("DILOCO_LUA") or "build/diloco-lua"

local function lines_of(s)
  local out = {}
  for l in (s .. "\n"):gmatch("(.-)\n") do out[#out + 1] = l end
  return out
end

describe("pretty.format", function()
  it("prints scalars as Lua would read them back", function()
    assert.are.equal("1", pretty.format(1))
    assert.are.equal("2.0", pretty.format(2.0))
    assert.are.equal("0.5", pretty.format(0.5))
    assert.are.equal('"a\\nb"', pretty.format("a\nb"))
    assert.are.equal(1, select("#", pretty.format("a"))) -- one value, for the REPL to print
    assert.are.equal("math.huge", pretty.format(math.huge))
    assert.are.equal("nil", pretty.format(nil))
    assert.are.equal("true", pretty.format(true))
  end)

  it("prints tables with the array part first and the keys sorted, not table: 0x...", function()
    local s = pretty.format({ 3, 4, b = 2, a = { x = 1 }, ["not a name"] = 5, [10] = 6 })
    assert.are.equal('{ 3, 4, [10] = 6, a = { x = 1 }, b = 2, ["not a name"] = 5 }', s)
    assert.are.equal("{}", pretty.format({}))
    assert.are.equal("{ 2, 3 }", pretty.format(diloco.zeros(2, 3).shape))
  end)

  it("marks cycles instead of recursing", function()
    local t = { name = "t" }
    t.self = t
    t.list = { t }
    assert.are.equal('{ list = { <cycle> }, name = "t", self = <cycle> }', pretty.format(t))
  end)

  it("stops at the depth and item limits and says how much is hidden", function()
    local deep = { a = { b = { c = { d = 1 } } } }
    assert.are.equal("{ a = { b = { c = {...} (1 entry) } } }", pretty.format(deep))
    assert.are.equal("{ a = {...} (1 entry) }", pretty.format(deep, { depth = 1 }))
    local big = {}
    for i = 1, 100 do big[i] = i end
    local s = pretty.format(big, { items = 5 })
    assert.are.equal("{ 1, 2, 3, 4, 5, ... (95 more) }", s)
  end)

  it("wraps a long table over lines within the width", function()
    local big = {}
    for i = 1, 40 do big[i] = i * 1000 end
    local s = pretty.format(big, { items = 40, width = 40 })
    local ls = lines_of(s)
    assert.are.equal("{", ls[1])
    assert.are.equal("}", ls[#ls])
    assert.is_true(#ls > 4)
    for _, l in ipairs(ls) do assert.is_true(#l <= 40, l) end
    assert.matches("^  1000, 2000, ", ls[2])
  end)

  it("names diloco's functions through the help registry", function()
    require "diloco.help"
    assert.are.equal("function: diloco.zeros", pretty.format(diloco.zeros))
    assert.are.equal("{ f = function: diloco.nn.GPT:loss }", pretty.format({ f = diloco.nn.GPT.loss }))
  end)

  it("refuses bad options naming them", function()
    assert.matches("opts.depth = 0: expected an integer >= 1", H.error_of(pretty.format, {}, { depth = 0 }))
    assert.matches("opts must be a table, got string", H.error_of(pretty.format, {}, "deep"))
  end)
end)

describe("pretty.tensor", function()
  it("prints aligned rows under a header with the shape", function()
    local t = diloco.tensor { { 1, 2, 3 }, { 4, 50, 6 } }
    assert.are.equal("Tensor[2,3]\n   1  2  3\n   4 50  6", pretty.tensor(t))
    assert.are.equal(pretty.tensor(t), pretty.format(t))
    assert.are.equal("Tensor[3]\n   0.5000 -1.0000  2.2500", pretty.tensor(diloco.tensor { 0.5, -1, 2.25 }))
  end)

  it("shows requires_grad and whether a gradient is there", function()
    local x = diloco.tensor { 1, 2 }:requires_grad_()
    assert.are.equal("Tensor[2] requires_grad", lines_of(pretty.tensor(x))[1])
    ;(x * x):sum():backward()
    assert.are.equal("Tensor[2] requires_grad (has grad)", lines_of(pretty.tensor(x))[1])
    assert.are.equal("Tensor[2] requires_grad op=affine", lines_of(pretty.tensor(x * 2))[1])
  end)

  it("elides the middle rows and columns of a large tensor", function()
    local t = diloco.arange(0, 10000):reshape(100, 100)
    local ls = lines_of(pretty.tensor(t))
    assert.are.equal("Tensor[100,100]", ls[1])
    assert.are.equal(1 + 11, #ls) -- 5 rows, the elision row, 5 rows
    assert.matches("^%s+0%s+1%s+2%s+3%s+4%s+%.%.%.%s+95%s+96%s+97%s+98%s+99$", ls[2])
    assert.matches("^[%s%.]+$", ls[7])
    assert.matches("9995%s+9996%s+9997%s+9998%s+9999$", ls[12])
    -- every row has the same width: the columns line up
    for i = 3, #ls do assert.are.equal(#ls[2], #ls[i]) end
  end)

  it("prints a >2-D tensor as 2-D slices, eliding slices beyond the limit", function()
    local t = diloco.arange(0, 24):reshape(2, 3, 4)
    local ls = lines_of(pretty.tensor(t))
    assert.are.same({ "Tensor[2,3,4]", "[1,:,:] =", "   0  1  2  3", "   4  5  6  7", "   8  9 10 11",
      "[2,:,:] =", "  12 13 14 15", "  16 17 18 19", "  20 21 22 23" }, ls)
    local many = pretty.tensor(diloco.zeros(10, 2, 2), { slices = 2 })
    assert.matches("%[1,:,:%] =", many)
    assert.matches("%.%.%. %(8 more slices%)", many)
    assert.matches("%[10,:,:%] =", many)
    assert.is_nil(many:find("%[5,:,:%]"))
  end)

  it("prints 0-d, empty, non-finite and freed tensors", function()
    assert.are.equal("Tensor[] 3", pretty.tensor(diloco.tensor(3)))
    assert.are.equal("Tensor[0] (no elements)", pretty.tensor(diloco.zeros(0)))
    assert.are.equal("Tensor[3]\n   nan  inf -inf", pretty.tensor(diloco.tensor { 0 / 0, math.huge, -math.huge }))
    local t = diloco.ones(2)
    t:close()
    assert.are.equal("Tensor (freed)", pretty.tensor(t))
    assert.matches("expected a Tensor, got table", H.error_of(pretty.tensor, {}))
  end)
end)

describe("repl.complete", function()
  local env = setmetatable({ diloco = diloco, t = diloco.ones(2), s = "text", count = 1, counter = {} },
    { __index = _G })

  it("completes globals, with '.' after a table and '(' after a function", function()
    assert.are.same({ "diloco." }, repl.complete("dilo", env))
    assert.are.same({ "count", "counter." }, repl.complete("coun", env))
    assert.are.same({ "print(" }, repl.complete("prin", env))
    assert.are.same({ "while" }, repl.complete("whil", env))
  end)

  it("completes fields of tables, and diloco's submodules before they are loaded", function()
    assert.are.same({ "diloco.zeros(" }, repl.complete("diloco.zer", env))
    local subs = repl.complete("diloco.n", env)
    assert.is_truthy(table.concat(subs, " "):find("diloco.nn.", 1, true))
    assert.is_truthy(table.concat(repl.complete("diloco.re", env), " "):find("diloco.recipe", 1, true))
    assert.are.same({ "diloco.nn.GPT" }, repl.complete("diloco.nn.GP", env))
    assert.are.same({ "string.format(" }, repl.complete("string.form", env))
  end)

  it("completes methods after ':' (userdata, strings, classes)", function()
    assert.are.same({ "t:relu(", "t:requires_grad_(", "t:reshape(", "t:retain_grad(" }, repl.complete("t:re", env))
    assert.are.same({ "s:upper(" }, repl.complete("s:up", env))
    assert.are.same({ "diloco.nn.GPT:generate(" }, repl.complete("diloco.nn.GPT:gen", env))
    -- ':' offers functions only; '.' on a Tensor its properties too
    assert.are.same({}, repl.complete("diloco:nn", env))
    assert.are.same({ "t.requires_grad", "t.requires_grad_(" }, repl.complete("t.req", env))
    assert.are.same({ "t.shape" }, repl.complete("t.sha", env))
  end)

  it("returns nothing, without raising, for what it cannot resolve", function()
    assert.are.same({}, repl.complete("nope.x", env))
    assert.are.same({}, repl.complete("count.x", env))
    assert.are.same({}, repl.complete("t.shape.x", env))
    assert.are.same({}, repl.complete("1 +", env))
    local hostile = setmetatable({}, { __index = function() error("boom") end })
    assert.are.same({}, repl.complete("h.x", { h = hostile }))
    assert.matches("word must be a string, got nil", H.error_of(repl.complete, nil))
  end)
end)

describe("the REPL (diloco-lua -i, piped)", function()
  local function run(input)
    local S = H.scratch()
    local path = S.write("in.lua", input)
    local out, status = H.sh(("(cat %s | HOME=%s %s -i)"):format(path, S.dir, LUA))
    S.cleanup()
    return out, status
  end

  it("prints results readably, and print() too", function()
    local out, status = run("x = {1, 2, a = 'b'}\nx\nprint(x, 'raw')\ndiloco.tensor{{1, 2}, {3, 4}}\n")
    assert.are.equal(0, status)
    assert.matches('> { 1, 2, a = "b" }\n', out, 1, true)
    assert.matches('{ 1, 2, a = "b" }\traw\n', out, 1, true)
    assert.matches("Tensor[2,2]\n  1 2\n  3 4\n", out, 1, true)
    assert.is_nil(out:find("table: 0x", 1, true))
  end)

  it("has help() for diloco and says clearly what is not in it", function()
    local out = run("help(diloco.zeros)\nhelp('matmul')\nhelp(os.time)\nhelp('frobnicate')\nhelp(print)\n")
    assert.matches("diloco.zeros(shape) -> Tensor", out, 1, true)
    assert.matches("diloco.matmul(a, b", out, 1, true)
    assert.matches("help: os.time is part of Lua (the Lua 5.4 manual), not of diloco", out, 1, true)
    assert.matches("diloco.pretty.print  (function)", out, 1, true) -- the REPL's print
    assert.matches('help: no entry for "frobnicate": it is not a function, type or module of diloco', out, 1, true)
  end)

  it("still reports errors and goes on", function()
    local out, status = run("error('oops')\n1 + 1\n")
    assert.are.equal(0, status)
    assert.matches("oops", out)
    assert.matches("\n> 2\n", out, 1, true)
  end)
end)

-- script(1) (bsdutils) gives the REPL a terminal: libedit, completion and history.
local have_script = os.execute("command -v script >/dev/null 2>&1")

describe("the REPL on a terminal", function()
  local function tty_run(input)
    local S = H.scratch()
    local path = S.write("in.txt", input)
    local out = H.sh(("(cd %s && cat %s | HOME=%s TERM=dumb timeout 20 script -qec %s /dev/null)"):format(
      S.dir, path, S.dir, LUA))
    return out, S
  end

  it("completes with Tab through libedit's hook", function()
    if not have_script then return pending("script(1) is not installed") end
    local out, S = tty_run("diloco.ze\t2)\nstring.up\t'ok')\n")
    S.cleanup()
    assert.is_truthy(out:gsub("\r", ""):find("> diloco.zeros(2)\nTensor[2]\n  0 0\n", 1, true), out)
    assert.matches("OK", out, 1, true)
  end)

  it("writes the history after each line, so a killed REPL loses nothing", function()
    if not have_script then return pending("script(1) is not installed") end
    local _, S = tty_run("x = 41\nx + 1\nos.execute('kill -9 ' .. diloco.pid())\nnever = 1\n")
    local hist = H.read_lines(S.dir .. "/.diloco_history")
    S.cleanup()
    -- libedit's format: a cookie line, then each line with blanks escaped (\040)
    assert.are.equal("_HiStOrY_V2_", hist[1])
    assert.are.equal("x\\040=\\04041", hist[2])
    assert.are.equal("x\\040+\\0401", hist[3])
    assert.matches("^os%.execute", hist[4])
    assert.are.equal(4, #hist)
  end)
end)
