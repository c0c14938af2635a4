-- diloco.progress on a terminal and off one (issue 11, "The terminal"): the status line
-- never wraps at the terminal's width, follows a resize, prints each eval once as a
-- line of its own; plain lines when not a terminal.  A fake terminal (a writer that
-- keeps what it is given, and a width function) stands in for the real one; the end of
-- the file runs `diloco-lua run` on a pseudo-terminal (script(1)).
local diloco = require "diloco"
local H = require "spec.helpers"
local exe = os.getenv("DILOCO_LUA")

local function writer()
  local w = { text = {} }
  function w:write(...)
    for _, s in ipairs({ ... }) do self.text[#self.text + 1] = s end
    return self
  end
  function w:flush() return self end
  function w:all() return table.concat(self.text) end
  return w
end

-- What a terminal shows: the text split where the cursor returns (\r) or moves down
-- (\n), escape sequences removed; each piece is what one redraw or line put on a row.
local function rows(text)
  local out = {}
  for piece in (text:gsub("\027%[K", "")):gmatch("[^\r\n]+") do out[#out + 1] = piece end
  return out
end

local function info(step, eval_loss)
  return { step = step, loss = 2.123456, rate = 123456.7, eta = 3725, eval_loss = eval_loss }
end

describe("the progress line on a terminal", function()
  it("never reaches the last column: cut to width - 1, at 80 columns and after a resize to 40", function()
    local cols = 80
    local w = writer()
    local bar = diloco.progress.new { total = 100000, tty = true, out = w, width = function() return cols end }
    bar:update(info(1), true)
    bar:eval { step = 1, loss = 2.5 }
    for s = 2, 50 do bar:update(info(s, 2.5), true) end
    local wide = rows(w:all())
    cols = 40
    for s = 51, 60 do bar:update(info(s, 2.5), true) end
    local all = rows(w:all())
    for i, r in ipairs(all) do
      local limit = i <= #wide and 79 or 39
      assert(#r <= limit, string.format("row %d is %d columns wide (limit %d): %q", i, #r, limit, r))
    end
    -- the status line really was cut (the full text is longer than 40 columns) and
    -- still starts with the step
    assert.matches("^step 60/100000", all[#all])
    assert.are.equal(39, #all[#all])
    -- 80 columns hold the bar and the whole text
    assert.matches("^%[[= ]+%] step 50/100000  loss 2%.1235  123%.5k tok/s  ETA 1h02m  eval 2%.5000$", wide[#wide])
  end)

  it("prints each eval once as a line of its own, the status line redrawn after it", function()
    local w = writer()
    local bar = diloco.progress.new { total = 100, tty = true, out = w, width = 80 }
    bar:update(info(1), true)
    bar:eval { step = 10, loss = 2.25, accuracy = 0.5 }
    bar:eval { step = 10, loss = 2.25, accuracy = 0.5 } -- the same eval again: not printed twice
    for s = 11, 30 do bar:update(info(s), true) end
    bar:eval { step = 20, loss = 2.0 }
    bar:update(info(31), true)
    local text = w:all()
    local lines = {}
    for l in text:gmatch("\r\027%[K([^\r\n]*)\n") do lines[#lines + 1] = l end
    assert.are.same({ "eval at step 10: loss 2.2500, accuracy 50.00%", "eval at step 20: loss 2.0000" }, lines)
    -- everything else is a redraw in place: no other newline
    local _, newlines = text:gsub("\n", "")
    assert.are.equal(2, newlines)
    assert.matches("eval 2%.0000\027%[K$", text) -- the status line shows the latest eval
  end)

  it("asks the terminal for its width when none is given, 80 when it reports none", function()
    local bar = diloco.progress.new { total = 10, tty = true, out = writer() }
    local cols = diloco.terminal_size(1)
    assert.are.equal(cols or 80, bar:columns())
    bar = diloco.progress.new { total = 10, tty = true, out = writer(), width = function() return nil end }
    assert.are.equal(80, bar:columns())
  end)
end)

describe("the progress off a terminal", function()
  it("writes plain periodic lines, and each eval once", function()
    local w = writer()
    local bar = diloco.progress.new { total = 100, every = 25, tty = false, out = w }
    for s = 1, 100 do
      bar:update(info(s, s > 50 and 2.5 or nil))
      if s == 50 then bar:eval { step = 50, loss = 2.5 } end
    end
    bar:finish()
    assert.are.equal(table.concat({
      "step 25/100  loss 2.1235  123.5k tok/s  ETA 1h02m",
      "step 50/100  loss 2.1235  123.5k tok/s  ETA 1h02m",
      "eval at step 50: loss 2.5000",
      "step 75/100  loss 2.1235  123.5k tok/s  ETA 1h02m",
      "step 100/100  loss 2.1235  123.5k tok/s  ETA 1h02m",
    }, "\n") .. "\n", w:all())
  end)
end)

describe("diloco-lua run on a pseudo-terminal", function()
  local scratch = H.scratch()
  teardown(scratch.cleanup)

  it("keeps every row within 60 columns of a 60-column terminal and prints the evals as lines", function()
    local recipe = scratch.write("tiny.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  steps = 40, eval = { every = 10, batches = 1 }, log = { every = 10 },
}
]])
    local cmd = string.format("stty cols 60 rows 20; %s run %s --out %s/out", exe, recipe, scratch.dir)
    local out, status = H.sh("script -qec " .. string.format("%q", cmd) .. " /dev/null")
    assert.are.equal(0, status, out)
    local evals = 0
    for _, r in ipairs(rows(out)) do
      assert(#r <= 59 or r:match("^done after") or r:match("^tiny:"), string.format("a %d-column row: %q", #r, r))
      if r:match("^eval at step %d+: loss %d") then evals = evals + 1 end
    end
    assert.are.equal(3, evals, out) -- steps 10, 20, 30 (the final one is in the done line)
    assert.matches("\rstep %d+/40", out) -- redrawn in place: it was a terminal
  end)
end)
