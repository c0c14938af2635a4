-- `diloco-lua compare` (lua/diloco/compare.lua): runs side by side.  Two tiny sims (decoupled
-- and diloco, 2 islands) and a tiny single-island run are trained here; the table's rows
-- must carry the numbers of their summaries as read from each metrics.jsonl, failed,
-- interrupted and unfinished runs are marked, --plot draws a PNG of the eval losses with
-- gnuplot, and bad input exits 2 naming the path, the line or the option.  A few seconds.
local diloco = require "diloco"
local compare = require "diloco.compare"
local plot = require "diloco.plot"
local H = require "spec.helpers"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")

local scratch = H.scratch()
local tmp = scratch.dir

local TINY = [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 16, batch = 4 },
  inner = diloco.optim.adamw { lr = 3e-3, warmup = 2 },
  steps = 24, eval = { every = 8, batches = 2 }, seed = 3,
  %s
}
]]

local function sh(args, env) return H.sh((env or "") .. " " .. exe .. " compare " .. args) end

local function metrics(name, records) return H.metrics_file(scratch, name, records) end

-- The plain table's lines split into cells (columns are two or more blanks apart; no
-- cell holds two blanks in a row).
local function rows_of(out)
  local rows = {}
  for line in out:gmatch("[^\n]+") do
    if not line:match("^%(") and not line:match("^diloco%-lua:") and not line:match("^wrote ") then
      local cells = {}
      for cell in (line .. "  "):gmatch("(%S.-)%s%s+") do cells[#cells + 1] = cell end
      rows[#rows + 1] = cells
    end
  end
  return rows
end

-- The cells a summary should give, computed here from the metrics file's own numbers.
local function expected(label, s, clock)
  local function pct(v) return v == nil and "-" or string.format("%.1f%%", 100 * v) end
  local idle = "-"
  if type(s.idle) == "table" and #s.idle > 0 then
    local sum = 0
    for _, v in ipairs(s.idle) do sum = sum + v end
    idle = pct(sum / #s.idle)
  end
  local time = clock == "virtual" and s.virtual_s or s.wall_s
  return { label, s.preset, string.format("%d", s.learners), string.format("%.4f", s.final_eval_loss),
    pct(s.goodput), pct(s.uptime), idle, s.merges and string.format("%d", s.merges) or "-",
    string.format("%.1f", s.bytes_up / 1e6), string.format("%.1f", s.bytes_down / 1e6),
    string.format("%d", s.tokens), string.format("%.1f s %s", time, clock), "ok" }
end

local HEADS = { "run", "preset", "learners", "eval loss", "goodput", "uptime", "idle", "merges", "MB up", "MB down",
  "tokens", "time", "status" }

teardown(scratch.cleanup)

describe("diloco-lua compare", function()
  local dec, dil, one -- run directories
  local sums = {}

  setup(function()
    local multi = scratch.write("multi.lua", TINY:format("sync = { H = 4 }, islands = { count = 2 },"))
    local single = scratch.write("single.lua", TINY:format(""))
    dec, dil, one = tmp .. "/dec", tmp .. "/dil", tmp .. "/one"
    for _, c in ipairs {
      { "sim", multi, dec, "--set sync.preset=decoupled" },
      { "sim", multi, dil, "--set sync.preset=diloco" },
      { "run", single, one, "" },
    } do
      local out, status = H.sh(string.format("%s %s %s --out %s --quiet %s", exe, c[1], c[2], c[3], c[4]))
      assert(status == 0, c[1] .. " " .. c[3] .. ": exit " .. tostring(status) .. "\n" .. out)
      sums[c[3]] = H.summary_of(H.events(c[3] .. "/metrics.jsonl"))
    end
  end)

  it("prints one row per run with its summary's numbers, virtual seconds for a sim, wall for a run", function()
    local out, status = sh(dec .. " " .. dil .. " " .. one .. "/metrics.jsonl")
    assert.are.equal(0, status, out)
    local rows = rows_of(out)
    assert.are.same(HEADS, rows[1])
    assert.are.equal(4, #rows, out)
    assert.are.same(expected("dec", sums[dec], "virtual"), rows[2])
    assert.are.same(expected("dil", sums[dil], "virtual"), rows[3])
    assert.are.same(expected("one", sums[one], "wall"), rows[4])
    -- what the sims are: the presets asked for, 2 learners, merges counted; one island merges nothing
    assert.are.same({ "decoupled", "diloco", "single" }, { rows[2][2], rows[3][2], rows[4][2] })
    assert.are.same({ "2", "2", "1" }, { rows[2][3], rows[3][3], rows[4][3] })
    assert.are.equal("-", rows[4][8])
    assert.matches("(eval loss: the final eval; idle: mean over learners; MB: 10^6 bytes;", out, 1, true)
  end)

  it("reads the same numbers through diloco.compare.row", function()
    local row = compare.row(plot.read(dec))
    local s = sums[dec]
    assert.are.equal("dec", row.run)
    assert.are.equal(s.final_eval_loss, row.final_eval_loss)
    assert.are.equal(s.goodput, row.goodput)
    assert.are.equal(s.bytes_up / 1e6, row.mb_up)
    assert.are.equal(s.virtual_s, row.time)
    assert.are.equal("virtual", row.clock)
    assert.are.equal(s.merges, row.merges)
    assert.are.equal("ok", row.status)
    row = compare.row(plot.read(one))
    assert.are.equal(sums[one].wall_s, row.time)
    assert.are.equal("wall", row.clock)
    assert.is_nil(row.idle) -- a single run's idle is null
  end)

  it("prints a Markdown table with --markdown, the same cells", function()
    local plain = rows_of((sh(dec .. " " .. one)))
    local out, status = sh(dec .. " " .. one .. " --markdown")
    assert.are.equal(0, status, out)
    local lines = {}
    for l in out:gmatch("[^\n]*") do lines[#lines + 1] = l end
    assert.are.equal("| " .. table.concat(HEADS, " | ") .. " |", lines[1])
    assert.are.equal("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|", lines[2])
    for r = 2, 3 do assert.are.equal("| " .. table.concat(plain[r], " | ") .. " |", lines[r + 1]) end
  end)

  it("marks a run that failed, one interrupted and one without a summary, with the failure's message", function()
    local err = metrics("failed.jsonl", {
      { "eval", step = 4, loss = 3.5, tokens = 256, wall_s = 0.5 },
      { "summary", preset = "single", learners = 1, steps = 4, tokens = 256, final_eval_loss = 3.5, goodput = 1,
        uptime = 1, bytes_up = 0, bytes_down = 0, wall_s = 0.75, interrupted = false,
        error = "training diverged at step 5: loss is nan" } })
    local int = metrics("stopped.jsonl", {
      { "summary", preset = "single", learners = 1, steps = 2, tokens = 128, wall_s = 0.3, interrupted = true,
        signal = 15 } })
    local cut = metrics("killed.jsonl", { { "step", step = 1, loss = 5, tokens = 64 } })
    local out, status = sh(table.concat({ err, int, cut, dec }, " "))
    assert.are.equal(0, status, out)
    local rows = rows_of(out)
    assert.are.equal("error", rows[2][13])
    assert.are.equal("3.5000", rows[2][4])
    assert.are.equal("interrupted (SIGTERM)", rows[3][13])
    assert.are.equal("-", rows[3][4]) -- no final eval in that summary
    assert.are.equal("0.3 s wall", rows[3][12])
    assert.are.same({ "killed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "no summary" }, rows[4])
    assert.are.equal("ok", rows[5][13])
    assert.matches("\nfailed: error: training diverged at step 5: loss is nan\n", out, 1, true)
    assert.matches("\nkilled: no summary: the last record is a step (a run still going, or one killed", out, 1, true)
  end)

  it("tells two runs of one name apart by their paths", function()
    os.execute("mkdir -p " .. tmp .. "/other/dec && cp " .. dec .. "/metrics.jsonl " .. tmp .. "/other/dec/")
    local rows = rows_of((sh(dec .. " " .. tmp .. "/other/dec/")))
    assert.are.equal(dec, rows[2][1])
    assert.are.equal(tmp .. "/other/dec", rows[3][1])
  end)

  it("draws each run's eval loss into a PNG with --plot, against tokens, time, wall or step", function()
    if not plot.find_gnuplot() then
      return pending("gnuplot is not on PATH (scripts/setup installs gnuplot-nox): the PNG is not checked")
    end
    for _, x in ipairs { "", " --x time", " --x wall", " --x step" } do
      local png = tmp .. "/cmp" .. x:gsub("%W", "") .. ".png"
      local out, status = sh(dec .. " " .. dil .. " " .. one .. " --plot " .. png .. x)
      assert.are.equal(0, status, x .. "\n" .. out)
      assert.matches("wrote " .. png .. ": 3 curves, ", out, 1, true)
      assert.are.equal(4, #rows_of(out), out) -- the table is printed too
      local f = assert(io.open(png, "rb"), png)
      assert.are.equal("\137PNG\r\n\26\n", f:read(8))
      f:close()
    end
  end)

  it("draws the curves through diloco.plot.series: one per run, with every eval", function()
    local runs = { plot.read(dec), plot.read(one) }
    local curves, missing, xlabel = compare.curves(runs, "tokens")
    assert.are.same({}, missing)
    assert.are.equal("tokens", xlabel)
    assert.are.same({ "dec", "one" }, { curves[1].label, curves[2].label })
    local evals = H.of_kind(H.events(dec .. "/metrics.jsonl"), "eval")
    assert.are.equal(#evals, #curves[1].points)
    for i, e in ipairs(evals) do
      assert.are.same({ e.tokens, e.loss }, { curves[1].points[i][1], curves[1].points[i][2] })
    end
    -- time: virtual seconds of the sim, wall seconds of the run, each curve saying which
    curves, _, xlabel = compare.curves(runs, "time")
    assert.are.equal("seconds (virtual for sim, wall for run)", xlabel)
    assert.are.same({ "dec (virtual s)", "one (wall s)" }, { curves[1].label, curves[2].label })
    assert.are.equal(evals[#evals].virtual_s, curves[1].points[#evals][1])
  end)

  it("leaves out of the PNG a run whose evals lack the axis, naming the fields they have", function()
    local no_tokens = metrics("notokens.jsonl", { -- evals as a run of islands as processes writes them
      { "eval", step = 4, loss = 3.5, wall_s = 0.5 }, { "eval", step = 8, loss = 3.0, wall_s = 1.0, final = true },
      { "summary", preset = "decoupled", learners = 2, steps = 16, tokens = 512, wall_s = 1.0 } })
    if plot.find_gnuplot() then
      local png = tmp .. "/partial.png"
      local out, status = sh(dec .. " " .. no_tokens .. " --plot " .. png)
      assert.are.equal(0, status, out)
      assert.matches("compare: --plot: notokens: no eval record has a loss next to a numeric tokens (its eval "
        .. "records have loss, step, wall_s; --x time, --x wall or --x step draws it), so it is not drawn", out, 1,
        true)
      assert.matches("wrote " .. png .. ": 1 curve, ", out, 1, true)
    end
    local out, status = sh(no_tokens .. " --plot " .. tmp .. "/none.png")
    assert.are.equal(2, status, out)
    assert.matches("--plot " .. tmp .. "/none.png: no run has an eval loss to draw against --x tokens: notokens: "
      .. "no eval record has a loss next to a numeric tokens", out, 1, true)
    assert.is_nil(io.open(tmp .. "/none.png", "rb"))
  end)

  it("without gnuplot prints the table, says why and exits 1 with no file written", function()
    local png = tmp .. "/nognuplot.png"
    local out, status = sh(dec .. " --plot " .. png, "PATH=/nonexistent")
    assert.are.equal(1, status, out)
    assert.matches("--plot " .. png .. ": gnuplot not found on PATH (scripts/setup installs the Debian package "
      .. "gnuplot-nox), so " .. png .. " was not written; the table above is complete", out, 1, true)
    assert.are.same(expected("dec", sums[dec], "virtual"), rows_of(out)[2])
    assert.is_nil(io.open(png, "rb"))
  end)

  it("refuses a directory without metrics.jsonl, a missing path, a malformed line, an empty file: exit 2", function()
    os.execute("mkdir -p " .. tmp .. "/notarun")
    local out, status = sh(dec .. " " .. tmp .. "/notarun")
    assert.are.equal(2, status, out)
    assert.matches(tmp .. "/notarun: a directory without metrics.jsonl (expected a run directory of diloco-lua run "
      .. "or sim, or its metrics.jsonl)", out, 1, true)
    assert.is_nil(out:find("decoupled", 1, true), "a table was printed:\n" .. out)
    out, status = sh(tmp .. "/nope")
    assert.are.equal(2, status, out)
    assert.matches(tmp .. "/nope: No such file or directory (expected a run directory", out, 1, true)
    local bad = scratch.write("bad.jsonl", '{"event":"step","step":1,"loss":2}\nnot json at all\n')
    out, status = sh(bad)
    assert.are.equal(2, status, out)
    assert.matches(bad .. ':2: not a metrics line (expected JSON objects with an "event" field', out, 1, true)
    local empty = scratch.write("empty.jsonl", "")
    out, status = sh(empty)
    assert.are.equal(2, status, out)
    assert.matches(empty .. ": no metrics records (the file is empty)", out, 1, true)
  end)

  it("refuses bad options with exit 2 and the synopsis", function()
    for args, want in pairs {
      [""] = "compare: missing RUN (a run directory of diloco-lua run or sim, or its metrics.jsonl)",
      [dec .. " --plot x.png --x bogus"] = "compare: --x bogus: expected tokens, time, wall or step",
      [dec .. " --x wall"] = "compare: --x wall: only with --plot FILE.png (the axis of the eval-loss chart)",
      [dec .. " --plot x.svg"] = "compare: --plot x.svg: expected a .png file name",
      [dec .. " --markdown=yes"] = "compare: option '--markdown' takes no value",
      [dec .. " --bogus"] = "compare: unknown option '--bogus'",
    } do
      local out, status = sh(args)
      assert.are.equal(2, status, args .. "\n" .. out)
      assert.matches(want, out, 1, true)
      assert.matches("usage: diloco-lua compare RUN... [--markdown] [--plot FILE.png] [--x AXIS]", out, 1, true)
    end
  end)

  it("has a --help from its option table, also as help(\"compare\")", function()
    local out, status = sh("--help")
    assert.are.equal(0, status, out)
    local cli = require "diloco.cli"
    assert.are.equal(cli.command_help("compare") .. "\n", out)
    assert.matches("--x AXIS               the x axis of --plot: tokens, time", out, 1, true)
    assert.are.equal(cli.command_help("compare") .. '\n(the Lua module: help("diloco.compare"))',
      (require("diloco.help").text("compare")))
  end)
end)
