-- diloco.help: one docstring registry (lua/diloco/help/docs.lua) that covers every
-- public function, type and module of diloco, and nothing that does not exist.
local diloco = require "diloco"
local help = require "diloco.help"

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

describe("the help registry", function()
  it("has an entry for every public function, type and module (a new one fails here)", function()
    local missing = help.missing()
    assert(#missing == 0, "no help entry (add one to lua/diloco/help/docs.lua): " .. table.concat(missing, ", "))
  end)

  it("has no entry naming something that does not exist (a removed one fails here)", function()
    local stale = help.stale()
    assert(#stale == 0, "help entries for names that do not exist: " .. table.concat(stale, ", "))
  end)

  it("walks the module, its userdata types, every lua/diloco/*.lua submodule and the nn classes", function()
    local names, kinds = {}, {}
    for _, e in ipairs(help.walk()) do
      names[#names + 1] = e.name
      kinds[e.kind] = (kinds[e.kind] or 0) + 1
    end
    for _, n in ipairs { "diloco", "diloco.zeros", "diloco.matmul", "Tensor", "Tensor:backward", "Params:zero_grad",
      "Loader:next", "VTime:next", "diloco.nn", "diloco.nn.GPT", "diloco.nn.GPT:generate", "diloco.nn.Module:parameters",
      "diloco.recipe.validate", "diloco.data.text", "diloco.optim.adamw", "diloco.help.text", "diloco.pretty.format",
      "diloco.repl.complete", "diloco.net", "diloco.net.new", "Net", "Net:poll" } do
      assert(has(names, n), n .. " is not walked")
    end
    assert.is_true(kinds["function"] > 150)
    assert.is_true(kinds.method > 100)
    assert.is_true(kinds.type >= 10 and kinds.class >= 14 and kinds.module >= 15)
  end)

  it("catches a function added at run time, and forgets it once it is gone", function()
    diloco.frobnicate = function() end
    help.refresh()
    local missing = help.missing()
    diloco.frobnicate = nil
    help.refresh()
    assert.are.same({ "diloco.frobnicate" }, missing)
    assert.are.same({}, help.missing())
  end)
end)

describe("help(x)", function()
  it("finds a function by value and by name, with or without the diloco prefix", function()
    local text = assert(help.text(diloco.zeros))
    assert.matches("^diloco%.zeros  %(function%)\ndiloco%.zeros%(shape%) %-> Tensor", text)
    assert.are.equal(text, help.text("zeros"))
    assert.are.equal(text, help.text("diloco.zeros"))
  end)

  it("documents a Tensor op method with its diloco.X entry and an object by its type", function()
    local t = diloco.ones(2)
    assert.matches("^Tensor:matmul  %(method%), documented as diloco%.matmul\ndiloco%.matmul%(a, b", help.text(t.matmul))
    assert.matches("^Tensor  %(type%)\n", help.text(t))
    assert.matches("Methods: .*backward", help.text(t))
    assert.matches("^Tensor:backward  %(method%)", help.text(t.backward))
    assert.matches("^Tensor:backward", help.text("Tensor:backward"))
  end)

  it("documents modules with their members, classes, instances and inherited methods", function()
    assert.matches("^diloco%.nn  %(module%)\n.*\nMembers: .*GPT", help.text(diloco.nn))
    local gpt = diloco.nn.GPT { vocab = 8, ctx = 4, dim = 8, layers = 1, heads = 2 }
    assert.matches("^diloco%.nn%.GPT  %(class%)", help.text(gpt))
    assert.matches("^diloco%.nn%.GPT:loss  %(method%)", help.text(gpt.loss))
    assert.matches("documented as diloco%.nn%.Module:forward", help.text(diloco.nn.Linear.forward))
    assert.matches("^diloco%.nn%.GPT:generate", help.text("nn.GPT:generate"))
    local params = diloco.Params(gpt:parameters())
    assert.matches("^Params  %(type%)", help.text(params))
    assert.matches("^Params:clip_grad_norm", help.text(params.clip_grad_norm))
  end)

  it("lists the modules, types and commands with no argument", function()
    local text = help.text()
    assert.matches("Modules: diloco .*diloco%.nn", text)
    assert.matches("Types: .*Tensor", text)
    assert.matches("Commands: run sim sample", text)
  end)

  it("gives a command's --help text, from the same option tables as diloco-lua COMMAND --help", function()
    local cli = require "diloco.cli"
    for _, c in ipairs(cli.commands) do
      if c.available ~= false then
        assert.are.equal(cli.command_help(c.name), help.text(c.name):gsub('\n%(the Lua module: help%("diloco%.%w+"%)%)$', ""))
      end
    end
    assert.matches('\n%(the Lua module: help%("diloco%.sim"%)%)$', help.text("sim"))
    assert.matches("^diloco%.sim  %(module%)", help.text("diloco.sim"))
    assert.matches("%-%-set KEY=VALUE", help.text("run"))
  end)

  it("says clearly that something is not in diloco", function()
    local t, err = help.text("frobnicate")
    assert.is_nil(t)
    assert.are.equal('help: no entry for "frobnicate": it is not a function, type or module of diloco ' ..
      "(help() lists them)", err)
    t, err = help.text(print)
    assert.is_nil(t)
    assert.are.equal("help: print is part of Lua (the Lua 5.4 manual), not of diloco (help() lists what diloco has)", err)
    t, err = help.text(42)
    assert.is_nil(t)
    assert.matches("^help: 42 %(a number%) is not a function, type or module of diloco", err)
    assert.matches("^help: function: 0x%x+ %(a function%) is not", select(2, help.text(function() end)))
  end)

  -- Seen: help(diloco) printed its members as one line of 1,000 characters.
  it("prints wrapped to the terminal (80 columns off a terminal), breaking at spaces", function()
    local f = io.tmpfile()
    local old = io.output()
    io.output(f)
    local ok = pcall(help, diloco)
    io.output(old)
    assert.is_true(ok)
    f:seek("set")
    local text, lines = f:read("a"), 0
    for line in text:gmatch("[^\n]+") do
      lines = lines + 1
      assert.is_true(#line <= 80, "a line of " .. #line .. ": " .. line)
    end
    assert.is_true(lines > 5)
    assert.matches("\n  %a", text) -- a continuation line, indented
    assert.are.equal("aaa bbb\n  ccc\n  ddd", help.wrap("aaa bbb ccc ddd", 8))
    assert.are.equal("a-very-long-word", help.wrap("a-very-long-word", 4)) -- nowhere to break
  end)

  it("prints through diloco.help(x) as well", function()
    local f = io.tmpfile()
    local old = io.output()
    io.output(f)
    local ok = pcall(diloco.help, "zeros")
    io.output(old)
    assert.is_true(ok)
    f:seek("set")
    assert.matches("^diloco%.zeros  %(function%)", f:read("a"))
  end)
end)
