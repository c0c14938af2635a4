-- `diloco-lua plot` (issue 11, "Pictures"): the curves of metrics files, as a PNG with
-- gnuplot or as text, any numeric field of any record kind, and its bad input (a file
-- that is not metrics, an empty one, a missing gnuplot, an unknown --x or --y).
local diloco = require "diloco"
local plot = require "diloco.plot"
local H = require "spec.helpers"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")

local scratch = H.scratch()
local tmp = scratch.dir

local function metrics(name, records) return H.metrics_file(scratch, name, records) end

-- A single-island run: step losses every 10 steps, evals at 20 and 40, the summary.
local RUN = {}
for s = 10, 40, 10 do RUN[#RUN + 1] = { "step", step = s, loss = 5 - s / 10, tokens = s * 32, wall_s = s / 10 } end
table.insert(RUN, 3, { "eval", step = 20, loss = 3.5, tokens = 640 })
RUN[#RUN + 1] = { "eval", step = 40, loss = 1.5, tokens = 1280, final = true }
RUN[#RUN + 1] = { "summary", steps = 40 }

-- A sim: two learners' steps, merges with their contributors, a fault.
local SIM = {
  { "step", learner = 1, step = 10, loss = 4.0, virtual_s = 10 },
  { "step", learner = 2, step = 10, loss = 4.5, virtual_s = 12 },
  { "merge", fragment = 2, version = 1, contributors = { { learner = 1 }, { learner = 2 } }, live = 1, virtual_s = 11 },
  { "merge", fragment = 1, version = 1, contributors = { { learner = 1 } }, live = 2, virtual_s = 12.5 },
  { "fault", kind = "kill", learner = 2, begin = true, duration = 5, virtual_s = 13 },
  { "step", learner = 1, step = 20, loss = 3.0, virtual_s = 20 },
  { "eval", step = 20, loss = 3.2, virtual_s = 20 },
  { "summary", steps = 20 },
}

local function sh(args, env) return H.sh((env or "") .. " " .. exe .. " plot " .. args) end

local function by_label(curves)
  local t = {}
  for _, c in ipairs(curves) do t[c.label] = c end
  return t
end

local function xs_ys(c)
  local xs, ys = {}, {}
  for i, p in ipairs(c.points) do xs[i], ys[i] = p[1], p[2] end
  return xs, ys
end

teardown(scratch.cleanup)

describe("diloco.plot reads metrics", function()
  it("takes a run directory (its metrics.jsonl) or the file, named after the run", function()
    os.execute("mkdir -p " .. tmp .. "/charlm")
    metrics("charlm/metrics.jsonl", RUN)
    local a, b = plot.read(tmp .. "/charlm"), plot.read(tmp .. "/charlm/metrics.jsonl")
    assert.are.equal("charlm", a.label)
    assert.are.equal("charlm", b.label)
    assert.are.equal(#RUN, #a.records)
    assert.are.equal("summary", a.records[#a.records].event)
  end)

  it("draws step and eval losses against steps, tokens or wall time", function()
    local run = plot.read(metrics("a.jsonl", RUN))
    local c = by_label(plot.series({ run }, plot.parse_spec("loss"), "steps"))
    local xs, ys = xs_ys(c["step loss"])
    assert.are.same({ 10, 20, 30, 40 }, xs)
    assert.are.same({ 4.0, 3.0, 2.0, 1.0 }, ys)
    xs, ys = xs_ys(c["eval loss"])
    assert.are.same({ 20, 40 }, xs)
    assert.are.same({ 3.5, 1.5 }, ys)
    c = by_label(plot.series({ run }, plot.parse_spec("eval"), "tokens"))
    assert.is_nil(c["step loss"])
    assert.are.same({ 640, 1280 }, (xs_ys(c["eval loss"])))
    c = by_label(plot.series({ run }, plot.parse_spec("step.loss"), "time"))
    assert.are.same({ 0, 1, 3, 4 }, (xs_ys(c["step loss"]))) -- seconds since the first record (the eval is 3rd)
  end)

  it("keeps the points a resumed run redid only once: the newer ones", function()
    local run = plot.read(metrics("resumed.jsonl", {
      { "step", step = 10, loss = 4 }, { "step", step = 20, loss = 3 }, { "step", step = 30, loss = 2.5 },
      { "resume", step = 20, from = "checkpoint-20" }, { "step", step = 30, loss = 2.0 }, { "step", step = 40, loss = 1 },
    }))
    local xs, ys = xs_ys(plot.series({ run }, plot.parse_spec("loss"), "steps")[1])
    assert.are.same({ 10, 20, 30, 40 }, xs)
    assert.are.same({ 4, 3, 2.0, 1 }, ys)
  end)

  it("draws any numeric field of any kind: one curve per learner, per fragment for merges", function()
    local sim = plot.read(metrics("sim.jsonl", SIM))
    local c = by_label(plot.series({ sim }, plot.parse_spec("loss"), "virtual"))
    assert.are.same({ 10, 20 }, (xs_ys(c["step loss learner 1"])))
    assert.are.same({ 12 }, (xs_ys(c["step loss learner 2"])))
    assert.are.same({ 20 }, (xs_ys(c["eval loss"])))
    -- an array counts as its length, a boolean as 1 or 0
    c = by_label(plot.series({ sim }, plot.parse_spec("contributors,live", "merge"), "virtual"))
    assert.are.same({ { 12.5 }, { 1 } }, { xs_ys(c["merge contributors fragment 1"]) })
    assert.are.same({ { 11 }, { 2 } }, { xs_ys(c["merge contributors fragment 2"]) })
    -- in the order of first appearance of each field, its fragments in turn (2 merged first)
    local labels = {}
    for i, curve in ipairs(plot.series({ sim }, plot.parse_spec("contributors,live", "merge"), "virtual")) do
      labels[i] = curve.label
    end
    assert.are.same({ "merge contributors fragment 1", "merge contributors fragment 2", "merge live fragment 1",
      "merge live fragment 2" }, labels)
    assert.are.same({ 1 }, select(2, xs_ys(c["merge live fragment 2"])))
    c = plot.series({ sim }, plot.parse_spec("fault.begin"), "virtual")
    assert.are.equal(1, #c)
    assert.are.equal("fault begin learner 2", c[1].label)
    assert.are.same({ 1 }, select(2, xs_ys(c[1])))
  end)
end)

describe("diloco-lua plot of a real run of several islands", function()
  -- OUT/metrics.jsonl (the syncer's: global evals, faults) and OUT/learner-N/metrics.jsonl
  -- (each learner's steps), with the times a run writes: learner 2 killed after its
  -- step 10 and back before step 30
  local dir = tmp .. "/real"
  local function write(path, records)
    local lines = {}
    for _, r in ipairs(records) do
      local f = {}
      for k, v in pairs(r) do if k ~= 1 and k ~= "t" then f[k] = v end end
      lines[#lines + 1] = diloco.metrics.line(r[1], f, r.t)
    end
    diloco.mkdir_p(path:match("^(.*)/[^/]+$"))
    local fh = assert(io.open(path, "w"))
    fh:write(table.concat(lines, "\n"), "\n")
    fh:close()
  end
  setup(function()
    write(dir .. "/metrics.jsonl", {
      { "eval", step = 10, loss = 4.2, t = 101 },
      { "fault", kind = "kill", learner = 2, begin = true, duration = 5, t = 102 },
      { "fault", kind = "joined", learner = 2, t = 108 },
      { "eval", step = 30, loss = 3.1, final = true, t = 120 },
      { "summary", steps = 60, t = 121 },
    })
    write(dir .. "/learner-1/metrics.jsonl", {
      { "step", learner = 1, step = 10, loss = 4.4, t = 100 },
      { "step", learner = 1, step = 20, loss = 3.9, t = 105 },
      { "step", learner = 1, step = 30, loss = 3.3, t = 110 },
      { "summary", learner = 1, steps = 30, t = 111 },
    })
    write(dir .. "/learner-2/metrics.jsonl", {
      { "step", learner = 2, step = 10, loss = 4.6, t = 100.5 },
      { "step", learner = 2, step = 30, loss = 3.5, t = 110.5 },
    })
  end)

  it("draws the global evals, each learner's loss from its own directory, and marks the faults", function()
    local run = plot.read(dir)
    assert.are.equal(2, run.learner_dirs)
    local c = by_label(plot.series({ run }, plot.parse_spec("loss", nil), "steps"))
    assert.are.equal(2, #c["eval loss"].points)
    assert.are.equal(3, #c["step loss learner 1"].points)
    assert.are.equal(2, #c["step loss learner 2"].points)
    -- the kill at learner 2's step 10 (its latest step then), and its return at the step
    -- it had reached when it came back, still 10 (its next step came later)
    local marks = plot.fault_marks({ run }, "steps")
    assert.are.same({ { 10, back = false, text = "kill 2" }, { 10, back = true, text = "joined 2" } }, marks)
    local out, status = sh(dir .. " --width 60 --height 8")
    assert.are.equal(0, status, out)
    assert.matches("\n  %S step loss learner 1 %(3 points%)\n", out)
    assert.matches("\n  %S step loss learner 2 %(2 points%)\n", out)
    assert.matches("\n  %S eval loss %(2 points%)\n", out)
    assert.matches("  ! a fault (1), ^ one over (1): under the axis", out, 1, true)
    -- both at step 10, the smallest x: the first column under the axis says a fault began there
    assert.matches("\n%s+%+%-+\n%s+!\n", out)
  end)

  it("says which learner's metrics it could not read, and draws the rest", function()
    local bad = tmp .. "/real-bad"
    os.execute(string.format("cp -r %s %s", dir, bad))
    local fh = assert(io.open(bad .. "/learner-2/metrics.jsonl", "w"))
    fh:write("not json\n")
    fh:close()
    local out, status = sh(bad .. " --width 60 --height 8 2>&1")
    assert.are.equal(0, status, out)
    assert.matches("diloco-lua: plot: " .. bad .. "/learner-2/metrics.jsonl:1: not a metrics line", out, 1, true)
    assert.matches("(learner 2's losses left out)", out, 1, true)
    assert.matches("\n  %S step loss learner 1 %(3 points%)\n", out)
    assert.is_nil(out:find("step loss learner 2", 1, true))
  end)
end)

describe("diloco-lua plot", function()
  local run_file, sim_file

  setup(function()
    run_file = metrics("run.jsonl", RUN)
    sim_file = metrics("sim2.jsonl", SIM)
  end)

  it("prints a text chart without --out, within --width, a mark and a legend line per curve", function()
    local out, status = sh(run_file .. " " .. sim_file .. " --width 60 --height 10")
    assert.are.equal(0, status, out)
    local lines = {}
    for l in out:gmatch("[^\n]*") do lines[#lines + 1] = l end
    for _, l in ipairs(lines) do assert(#l <= 60, string.format("%d columns: %q", #l, l)) end
    assert.are.equal("run, sim2", lines[1]) -- the title: the runs' names
    local plot_rows = 0
    for _, l in ipairs(lines) do
      if l:match("^%s*[%d%.e%-]* |") then plot_rows = plot_rows + 1 end
    end
    assert.are.equal(10, plot_rows)
    assert.matches("\n  %* run step loss %(4 points%)\n", out)
    assert.matches("\n  %+ run eval loss %(2 points%)\n", out)
    assert.matches("\n  o sim2 step loss learner 1 %(2 points%)\n", out)
    assert.matches("\n  # sim2 eval loss %(1 point%)\n", out)
    assert.matches("\n  x sim2 step loss learner 2 %(1 point%)\n", out)
    -- the top row is the largest y, 4.5: learner 2 at step 10, the smallest x, so the first column
    assert.are.equal(" 4.5 |x", lines[2])
  end)

  it("writes a PNG with gnuplot", function()
    local png = tmp .. "/loss.png"
    local out, status = sh(run_file .. " --out " .. png .. " --x tokens")
    assert.are.equal(0, status, out)
    assert.matches("wrote " .. png .. ": 2 curves, 6 points", out, 1, true)
    local f = assert(io.open(png, "rb"))
    assert.are.equal("\137PNG\r\n\26\n", f:read(8))
    f:close()
  end)

  it("without gnuplot prints the text chart, says why and exits 1 with no file written", function()
    local png = tmp .. "/nognuplot.png"
    local out, status = sh(run_file .. " --out " .. png, "PATH=/nonexistent")
    assert.are.equal(1, status, out)
    assert.matches("gnuplot not found on PATH (scripts/setup installs the Debian package gnuplot-nox)", out, 1, true)
    assert.matches("* step loss (4 points)", out, 1, true)
    assert.is_nil(io.open(png, "rb"))
  end)

  it("refuses a file that is not metrics, naming its line, with exit 2", function()
    local bad = scratch.write("notes.jsonl", '{"event":"step","step":1,"loss":2}\nhello world\n')
    local out, status = sh(bad)
    assert.are.equal(2, status, out)
    assert.matches(bad .. ':2: not a metrics line (expected JSON objects with an "event" field', out, 1, true)
    out, status = sh(scratch.write("obj.jsonl", '{"step":1}\n'))
    assert.are.equal(2, status, out)
    assert.matches("obj.jsonl:1: not a metrics line", out, 1, true)
  end)

  it("refuses an empty file, a missing one and a directory without metrics, with exit 2", function()
    local empty = scratch.write("empty.jsonl", "")
    local out, status = sh(empty)
    assert.are.equal(2, status, out)
    assert.matches(empty .. ": no metrics records (the file is empty)", out, 1, true)
    out, status = sh(tmp .. "/nope")
    assert.are.equal(2, status, out)
    assert.matches("nope: No such file or directory (expected a run directory", out, 1, true)
    os.execute("mkdir -p " .. tmp .. "/emptydir")
    out, status = sh(tmp .. "/emptydir")
    assert.are.equal(2, status, out)
    assert.matches("emptydir: Is a directory (expected a run directory", out, 1, true)
  end)

  it("skips a line cut short by a kill mid-write, saying so", function()
    local cut = scratch.write("cut.jsonl", '{"event":"step","step":10,"loss":2}\n{"event":"step","st\n'
      .. '{"event":"step","step":20,"loss":1}\n')
    local out, status = sh(cut .. " --width 40 --height 8")
    assert.are.equal(0, status, out)
    assert.matches("skipped 1 line cut short", out, 1, true)
    assert.matches("step loss (2 points)", out, 1, true)
  end)

  it("refuses an unknown --y or --x naming the numeric fields there are, with exit 2", function()
    local out, status = sh(run_file .. " --y bogus")
    assert.are.equal(2, status, out)
    assert.matches("--y bogus: no step or eval record has it as a number next to a numeric step", out, 1,
      true)
    assert.matches("(the numeric fields of those records: final, loss, step, time, tokens, wall_s)", out, 1, true)
    out, status = sh(run_file .. " --x bogus")
    assert.are.equal(2, status, out)
    assert.matches("--x bogus: no step or eval record has a numeric bogus (expected steps, tokens, time, "
      .. "virtual or a numeric field", out, 1, true)
    out, status = sh(sim_file .. " --events merge --y contributors") -- merges have no step
    assert.are.equal(2, status, out)
    assert.matches("--x steps: no merge record has a numeric step", out, 1, true)
    for args, want in pairs {
      ["--events bogus"] = "--events bogus: unknown record kind 'bogus' (expected step, eval, merge, fault,",
      ["--y step.a.b"] = "--y step.a.b: expected FIELD or KIND.FIELD",
      ["--y nokind.loss"] = "--y nokind.loss: unknown record kind 'nokind'",
      ["--x 'a b'"] = "--x a b: expected steps, tokens, time, virtual or a numeric field name",
      ["--size 10"] = "--size 10: expected WIDTHxHEIGHT in pixels",
      ["--out x.svg"] = "--out x.svg: expected a .png file name",
      ["--width 5"] = "--width 5: expected an integer in [30, 1000]",
    } do
      out, status = sh(run_file .. " " .. args)
      assert.are.equal(2, status, args .. "\n" .. out)
      assert.matches(want, out, 1, true)
    end
    out, status = sh("")
    assert.are.equal(2, status, out)
    assert.matches("plot: missing RUN_OR_METRICS", out, 1, true)
  end)
end)

describe("diloco-lua plot --kind compute", function()
  -- two islands' accounts, as sim's summary gives them (docs/sim.md, the account)
  local A1 = { useful = 0.75, overwritten = 0.08, dropped = 0.05, unsent = 0.02, down = 0.1, waiting = 0, done = 0 }
  local A2 = { useful = 0.5, overwritten = 0.1, dropped = 0.2, unsent = 0.05, down = 0, waiting = 0.15, done = 0 }
  -- the total as the summary has it: weighted by the islands' rates (3:1 here)
  local T = { useful = 0.6875, overwritten = 0.085, dropped = 0.0875, unsent = 0.0275, down = 0.075, waiting = 0.0375,
    done = 0 }
  local acc = metrics("acc.jsonl", { { "summary", steps = 20, per_learner = { { account = A1, merged = 7 },
    { account = A2, merged = 5 } }, account = T } })
  local run_file = metrics("run1.jsonl", RUN) -- a single island's: no account

  it("prints each island's shares and the total as a table", function()
    local out, status = sh(acc .. " --kind compute")
    assert.are.equal(0, status, out)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("^island%s+useful%s+overwritten%s+dropped%s+unsent%s+down%s+waiting%s+done early%s+merges$", lines[1])
    assert.matches("^1%s+75.0%%%s+8.0%%%s+5.0%%%s+2.0%%%s+10.0%%%s+0.0%%%s+0.0%%%s+7$", lines[2])
    assert.matches("^2%s+50.0%%%s+10.0%%%s+20.0%%%s+5.0%%%s+0.0%%%s+15.0%%%s+0.0%%%s+5$", lines[3])
    -- the total: the summary's (not recomputed here), and the merges summed
    assert.matches("^all%s+68.8%%%s+8.5%%%s+8.8%%%s+2.8%%%s+7.5%%%s+3.8%%%s+0.0%%%s+12$", lines[4])
  end)

  it("draws the stacked bars into a PNG with gnuplot", function()
    local png = tmp .. "/compute.png"
    local out, status = sh(acc .. " " .. run_file .. "x --kind compute --out " .. png)
    assert.are.equal(2, status, out) -- the second is no run: refused before anything is drawn
    out, status = sh(acc .. " --kind compute --out " .. png)
    assert.are.equal(0, status, out)
    assert.matches("wrote " .. png .. ": 2 islands", out, 1, true)
    local f = assert(io.open(png, "rb"))
    assert.are.equal("\137PNG\r\n\26\n", f:read(8))
    f:close()
  end)

  it("refuses a run whose summary has no account, and an unknown kind, with exit 2", function()
    local out, status = sh(run_file .. " --kind compute")
    assert.are.equal(2, status, out)
    assert.matches(run_file .. ": no account in its summary (expected the summary of a run of several islands", out, 1,
      true)
    out, status = sh(acc .. " --kind bars")
    assert.are.equal(2, status, out)
    assert.matches("--kind bars: expected curves or compute", out, 1, true)
  end)
end)
