-- The learning-quality experiments of docs/experiments.md: runs `diloco-lua sim` on
-- charlm (M = 4 islands, equal tokens) in several settings, then writes the tables and
-- PNG plots (gnuplot) of every group into docs/experiments.md and docs/experiments/.
--
--   diloco-lua scripts/experiments/run.lua [GROUP...] [--build DIR] [--jobs N] [--report-only]
--   groups: parity quality gap budget codecs rda mixed chaos bytes   (default: all)
--
-- Runs land in runs/experiments/NAME/ and are reused when their command line is
-- unchanged (delete a directory to redo it).  Each job trains with one compute thread;
-- --jobs (default 2) run side by side.  Token budget: 4 islands x 600 steps x 1024
-- tokens = 2,457,600 tokens per run (M = 8: 8 x 300; the budget group: 2x to 8x that);
-- seeds: the recipe's (0).
-- The report is regenerated from every run found, so groups can be run separately.
local diloco = require "diloco"

local root = (arg[0]:match("^(.*)/scripts/experiments/run%.lua$") or ".")
local groups, build, jobs, report_only = {}, root .. "/build", 2, false
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--build" then build, i = arg[i + 1], i + 1
    elseif a == "--jobs" then jobs, i = tonumber(arg[i + 1]), i + 1
    elseif a == "--report-only" then report_only = true
    else groups[#groups + 1] = a end
    i = i + 1
  end
end
local ALL = { "parity", "quality", "gap", "budget", "codecs", "rda", "mixed", "chaos", "bytes" }
if #groups == 0 then groups = ALL end
local want = {}
for _, g in ipairs(groups) do want[g] = true end

local EXE = build .. "/diloco-lua"
local RUNS = root .. "/runs/experiments"
local DOCS = root .. "/docs/experiments"
local STEPS = 600
local TOKENS = 4 * STEPS * 16 * 64
local BASE = root .. "/recipes/decoupled.lua"
local COMMON = { "threads=1", "eval.every=100", "eval.batches=32", "steps=" .. STEPS, "checkpoint.minutes=0" }

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok
end

local C = dofile(root .. "/scripts/experiments/common.lua")
local quote, read, write = C.quote, C.read, C.write

-- ---- the runs ----

local runs, by_name = {}, {}
local function add(group, name, sets, recipe)
  local r = { group = group, name = name, recipe = recipe or BASE, sets = {} }
  for _, s in ipairs(COMMON) do r.sets[#r.sets + 1] = s end
  for _, s in ipairs(sets) do r.sets[#r.sets + 1] = s end
  runs[#runs + 1] = r
  by_name[name] = r
  return r
end

local LRS, HS = { 0.4, 0.7, 1.0 }, { 24, 96 }
-- dp and diloco wait for the links: on ideal ones they train the same steps (tokens) as
-- streaming and decoupled, which never wait and train on the 20 ms links exactly as on
-- ideal ones (the parity runs, on ideal links, give the same losses to the last digit)
local IDEAL = { "islands.latency=0", "islands.bandwidth=inf" }
add("quality", "dp", { "sync.preset=dp", IDEAL[1], IDEAL[2] })
for _, p in ipairs { "diloco", "streaming", "decoupled" } do
  for _, lr in ipairs(LRS) do
    for _, H in ipairs(HS) do
      local sets = { "sync.preset=" .. p, "outer.lr=" .. lr, "sync.H=" .. H }
      if p == "diloco" then sets[4], sets[5] = IDEAL[1], IDEAL[2] end
      add("quality", string.format("%s-lr%.1f-H%d", p, lr, H), sets)
    end
  end
end
-- closing the gap: decoupled with more frequent syncs
for _, H in ipairs { 6, 12 } do
  for _, lr in ipairs { 0.7, 1.0 } do
    add("gap", string.format("decoupled-lr%.1f-H%d", lr, H), { "sync.preset=decoupled", "outer.lr=" .. lr, "sync.H=" .. H })
  end
end
-- and mixing on arrival (alpha = 0.5, as streaming) instead of overwriting, and no
-- overlap (tau = 0: a merge is applied at the first step boundary after it arrives)
for _, H in ipairs { 12, 24 } do
  add("gap", string.format("decoupled-lr0.7-H%d-a0.5", H), { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=" .. H,
    "sync.alpha=0.5" })
  add("gap", string.format("decoupled-lr0.7-H%d-t0", H), { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=" .. H,
    "sync.tau=0" })
end
add("gap", "decoupled-lr0.7-H12-t0-a0.5", { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=12", "sync.tau=0",
  "sync.alpha=0.5" })
-- around the best (H = 12, alpha = 0.5): more mixing, a smaller overlap, another outer lr
for _, v in ipairs { { "a0.75", "sync.alpha=0.75" }, { "a0.5-t1", "sync.alpha=0.5", "sync.tau=1" },
    { "a0.5-lr1.0", "sync.alpha=0.5", "outer.lr=1.0" }, { "a0.5-lr0.4", "sync.alpha=0.5", "outer.lr=0.4" } } do
  local sets = { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=12" }
  for i = 2, #v do sets[#sets + 1] = v[i] end
  add("gap", "decoupled-H12-" .. v[1], sets)
end
-- around the best 1x setting of the grid above (H = 12, alpha = 0.5, outer lr 0.4): the
-- outer momentum, the merge, the period (each run's --set list: the base, then its own)
local AROUND = {
  { "decoupled-H12-a0.5-lr0.4-m0.5-lr0.7", { "outer.momentum=0.5", "outer.lr=0.7" }, "outer momentum 0.5, lr 0.7" },
  { "decoupled-H12-a0.5-lr0.4-m0.5-lr1.0", { "outer.momentum=0.5", "outer.lr=1.0" }, "outer momentum 0.5, lr 1.0" },
  { "decoupled-H12-a0.5-lr0.4-m0.7-lr0.5", { "outer.momentum=0.7", "outer.lr=0.5" }, "outer momentum 0.7, lr 0.5" },
  { "decoupled-H12-a0.5-lr0.4-mean", { "sync.merge=mean" }, "the weighted mean instead of RDA" },
  { "decoupled-H3-a0.5-lr0.4", { "sync.H=3" }, "H = 3" },
  { "decoupled-H6-a0.5-lr0.4", { "sync.H=6" }, "H = 6" },
}
for _, v in ipairs(AROUND) do
  local sets = { "sync.preset=decoupled", "sync.H=12", "sync.alpha=0.5", "outer.lr=0.4" }
  for _, e in ipairs(v[2]) do sets[#sets + 1] = e end
  add("gap", v[1], sets)
end
-- a shorter period with the same mixing and a gentler outer step: the best at 1x
add("gap", "decoupled-H6-a0.5-lr0.3", { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=6", "sync.alpha=0.5",
  "outer.lr=0.3" })
-- budget: dp, the best decoupled setting (the run decoupled-H12-a0.5-lr0.4's exact --set
-- list) and diloco (H = 24, lr 0.7, as diloco-lr0.7-H24) at 2x, 4x and 8x the tokens:
-- 1200, 2400 and 4800 steps per island (4 x steps x 1024 = 4,915,200, 9,830,400 and
-- 19,660,800 tokens).  The 1x points are those runs.  The inner cosine spans `steps` (sim:
-- total = steps per island at speed 1); the warm-up is the recipe default
-- min(100, steps // 10): 60 at 1x, 100 at the others.
local BUDGETS = { 2 * STEPS, 4 * STEPS, 8 * STEPS }
local BUDGET_SETS = {   -- the 1x run's name and its --set list
  { "dp", { "sync.preset=dp", IDEAL[1], IDEAL[2] } },
  { "decoupled-H12-a0.5-lr0.4", { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=12", "sync.alpha=0.5", "outer.lr=0.4" } },
  { "diloco-lr0.7-H24", { "sync.preset=diloco", "outer.lr=0.7", "sync.H=24", IDEAL[1], IDEAL[2] } },
}
-- the 1x best, decoupled-H6-a0.5-lr0.3, at 2x and 4x (b[3]: its budgets)
BUDGET_SETS[#BUDGET_SETS + 1] = { "decoupled-H6-a0.5-lr0.3",
  { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=6", "sync.alpha=0.5", "outer.lr=0.3" }, { 2 * STEPS, 4 * STEPS } }
for _, b in ipairs(BUDGET_SETS) do
  for _, steps in ipairs(b[3] or BUDGETS) do
    local sets = { "steps=" .. steps }
    for _, s in ipairs(b[2]) do sets[#sets + 1] = s end
    add("budget", string.format("%s-steps%d", b[1], steps), sets)
  end
end
for _, c in ipairs { "int4", "e3m0" } do
  for _, ef in ipairs { false, true } do
    add("codecs", string.format("decoupled-%s%s", c, ef and "-ef" or ""),
      { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=24", "sync.codec=" .. c, "sync.error_feedback=" .. tostring(ef) })
  end
end
for _, m in ipairs { "rda", "mean" } do
  add("rda", "m8-" .. m, { "sync.preset=decoupled", "islands.count=8", "steps=" .. STEPS // 2, "sync.merge=" .. m })
end
-- mixed: islands 1, 2 at speed 1 and 3, 4 at 0.5 for 800 virtual seconds = 2400 steps in all
for _, q in ipairs { "1", "all" } do
  add("mixed", "mixed-K" .. q, { "steps=800", "eval.every=50", "sync.quorum=" .. q }, root .. "/recipes/mixed.lua")
end
add("mixed", "mixed-diloco", { "steps=800", "eval.every=50", "sync.preset=diloco" }, root .. "/recipes/mixed.lua")
for _, p in ipairs { "decoupled", "diloco" } do
  add("chaos", "chaos-" .. p, { "sync.preset=" .. p }, root .. "/recipes/chaos.lua")
end

local function command(r)
  local parts = { quote(EXE), "sim", quote(r.recipe), "--out", quote(RUNS .. "/" .. r.name), "--quiet", "--overwrite" }
  for _, s in ipairs(r.sets) do parts[#parts + 1] = "--set " .. quote(s) end
  return table.concat(parts, " ")
end

-- A run is done when its summary is there and its command line, the executable aside
-- (any build of the same sources), is the same.
local function done(r)
  local dir = RUNS .. "/" .. r.name
  local function strip(c) return c and (c:gsub("^'[^']*' ", "")) end
  if strip(read(dir .. "/command.txt")) ~= strip(command(r)) then return false end
  local m = read(dir .. "/metrics.jsonl")
  return m ~= nil and m:find('"event":"summary"', 1, true) ~= nil
end

-- ---- running ----

local todo = {}
for _, r in ipairs(runs) do
  local needed = want[r.group] or (want.bytes and r.group == "quality")
  if needed and not report_only and not done(r) then todo[#todo + 1] = r end
end
sh("mkdir -p " .. quote(RUNS) .. " " .. quote(DOCS))
if #todo > 0 then
  local list = {}
  for _, r in ipairs(todo) do
    local dir = RUNS .. "/" .. r.name
    list[#list + 1] = string.format("mkdir -p %s && %s > %s/summary.json 2> %s/stderr.txt && printf %%s %s > %s/command.txt; echo done %s",
      quote(dir), command(r), quote(dir), quote(dir), quote(command(r)), quote(dir), r.name)
  end
  write(RUNS .. "/jobs.txt", table.concat(list, "\n") .. "\n")
  io.stderr:write(string.format("running %d sims, %d at a time\n", #todo, jobs))
  sh(string.format("cd %s && xargs -P %d -d '\\n' -I{} sh -c {} < %s", quote(root), jobs, quote(RUNS .. "/jobs.txt")))
end
if want.parity and not report_only and read(RUNS .. "/parity.txt") == nil then
  io.stderr:write("running the PyTorch parity of the four presets\n")
  sh(string.format("cd %s && scripts/reference/presets_parity %s recipes/decoupled.lua --set steps=%d > %s",
    quote(root), quote(build), STEPS, quote(RUNS .. "/parity.tmp")))
  os.rename(RUNS .. "/parity.tmp", RUNS .. "/parity.txt")
end

-- ---- reading results ----

local function events(name)
  local text = read(RUNS .. "/" .. name .. "/metrics.jsonl")
  if not text then return nil end
  local ev = {}
  for line in text:gmatch("[^\n]+") do ev[#ev + 1] = diloco.json_decode(line) end
  return ev
end

local cache = {}
local function result(name)
  if cache[name] ~= nil then return cache[name] or nil end
  local ev = events(name)
  local r = false
  if ev and ev[#ev] and ev[#ev].event == "summary" then
    r = { summary = ev[#ev], evals = {} }
    for _, e in ipairs(ev) do
      if e.event == "eval" then r.evals[#r.evals + 1] = e end
    end
  end
  cache[name] = r
  return r or nil
end

local function f4(x) return x and string.format("%.4f", x) or "—" end
local function pct(x, base) return (x and base) and string.format("%+.1f%%", 100 * (x - base) / base) or "—" end
local function human(n)
  if not n then return "—" end
  if n >= 1e9 then return string.format("%.2f GB", n / 1e9) end
  if n >= 1e6 then return string.format("%.1f MB", n / 1e6) end
  return string.format("%.0f kB", n / 1e3)
end

-- gnuplot: curves = { {title, points = {{x, y}, ...}}, ... }
local function plot(file, title, xlabel, ylabel, curves, opts)
  opts = opts or {}
  local dat = {}
  for i, c in ipairs(curves) do
    local lines = {}
    for _, p in ipairs(c.points) do lines[#lines + 1] = string.format("%.10g %.10g", p[1], p[2]) end
    local path = string.format("%s/.%s.%d.dat", DOCS, file, i)
    write(path, table.concat(lines, "\n") .. "\n")
    local style = opts.style or "linespoints"
    if not style:find(" lw ") then style = style .. " lw 2" end
    dat[i] = string.format("%s with %s title %s", quote(path), style, quote(c.title))
  end
  local script = {
    "set terminal pngcairo size 900,560 font ',11'",
    "set output " .. quote(DOCS .. "/" .. file .. ".png"),
    "set title " .. quote(title), "set xlabel " .. quote(xlabel), "set ylabel " .. quote(ylabel),
    "set grid", "set key top right",
  }
  if opts.logy then script[#script + 1] = "set logscale y" end
  if opts.yrange then script[#script + 1] = "set yrange " .. opts.yrange end
  if opts.boxes then
    script[#script + 1] = "set style fill solid 0.7"
    script[#script + 1] = "set boxwidth 0.6"
    script[#script + 1] = "set xtics rotate by -30"
  end
  script[#script + 1] = "plot " .. table.concat(dat, ", ")
  write(DOCS .. "/." .. file .. ".gp", table.concat(script, "\n") .. "\n")
  local ok = sh("gnuplot " .. quote(DOCS .. "/." .. file .. ".gp") .. " 2>/dev/null")
  for i = 1, #curves do os.remove(string.format("%s/.%s.%d.dat", DOCS, file, i)) end
  os.remove(DOCS .. "/." .. file .. ".gp")
  return ok and ("experiments/" .. file .. ".png") or nil
end

local function curve(name, title, x)
  local r = result(name)
  if not r then return nil end
  local pts = {}
  for _, e in ipairs(r.evals) do
    pts[#pts + 1] = { x == "time" and e.virtual_s or (e.tokens or 0) / 1e6, e.loss }
  end
  return { title = title or name, points = pts }
end

local function img(md, path, alt)
  if path then md[#md + 1] = string.format("\n![%s](%s)\n", alt, path) end
end

-- the final eval loss of a run (nil: not run, or no eval)
local function loss(name)
  local r = result(name)
  return r and r.summary.final_eval_loss
end

-- a table cell: "loss (gap to base)", or "—"
local function loss_cell(l, base) return l and string.format("%s (%s)", f4(l), pct(l, base)) or "—" end

-- "label: loss (gap to base)" added to list when the run is there
local function note_run(list, label, name, base)
  local r = result(name)
  if r then list[#list + 1] = string.format("%s: %s (%s)", label, f4(r.summary.final_eval_loss),
    pct(r.summary.final_eval_loss, base)) end
end

-- ---- the report ----

local md = {}
local function p(fmt, ...) md[#md + 1] = select("#", ...) > 0 and string.format(fmt, ...) or fmt end
-- a section of the report, "## title" and body(), when cond (its group is wanted, or its
-- runs are there)
local function group(cond, title, body)
  if not cond then return end
  p("## " .. title)
  p("")
  body()
  p("")
end
-- a Markdown table's head: its column titles
local function head(...)
  local cols = { ... }
  p("| " .. table.concat(cols, " | ") .. " |")
  p("|" .. string.rep("---|", #cols))
end
-- the eval loss curves of a group, drawn into docs/experiments/FILE.png (xlabel: tokens)
local function loss_plot(file, title, curves, xlabel)
  img(md, plot(file, title, xlabel or "tokens (millions)", "eval loss", curves, { yrange = "[*:3.2]" }), file)
end
p("# Experiments: Decoupled DiLoCo and its baselines on charlm")
p("")
p("Generated by `diloco-lua scripts/experiments/run.lua` (%s); edit that script, not this file.", os.date("!%Y-%m-%d"))
p("Every run is `diloco-lua sim` on the charlm GPT (0.83M parameters, byte-level fortunes,")
p("ctx 64, batch 16 per island) with 4 islands of 600 inner steps each: **%s tokens per run**", tostring(TOKENS))
p("(dp: 600 steps of 4 x 16 sequences), seed 0, one compute thread per run, the inner AdamW of")
p("charlm (lr 3e-3 cosine to 3e-4, warm-up 60, weight decay 0.1, clip 1). Evaluation: the global")
p("model on the same 32 evenly spread held-out batches (docs/data.md) every 100 steps and at the")
p("end. Links: 20 ms, 2.5 Gbps unless stated (dp and diloco in the quality grid: ideal links, so they")
p("train the same tokens; streaming and decoupled never wait, and train identically on either).")
p("Loss values are mean cross-entropy in nats per byte.")
p("")

group(result("dp") or read(RUNS .. "/parity.txt"), "Correctness: each preset against an independent PyTorch implementation", function()
  p("`scripts/reference/presets_parity` runs each preset on `sim` and on `scripts/reference/diloco_ref.py`")
  p("(PyTorch 1.13, written from docs/algorithm.md without our code) from the same initial parameters, batches,")
  p("fragment plan and settings, on zero-latency infinite-bandwidth links where both are synchronous")
  p("(outer Nesterov 0.7/0.9, H = 24; streaming and decoupled with 4 fragments, tau = 2). Goal: within 2%.")
  p("")
  local txt = read(RUNS .. "/parity.txt")
  if txt then
    head("preset", "ours", "PyTorch", "difference")
    local bars = {}
    for preset, a, b, d in txt:gmatch("(%S+)%s+ours (%S+)%s+pytorch (%S+)%s+difference (%S+)") do
      p("| %s | %s | %s | %s |", preset, a, b, d)
      bars[#bars + 1] = { preset, tonumber(a), tonumber(b) }
    end
    local ours, ref = { title = "diloco-lua sim", points = {} }, { title = "PyTorch mirror", points = {} }
    for i, b in ipairs(bars) do
      ours.points[i] = { i - 0.15, b[2] }
      ref.points[i] = { i + 0.15, b[3] }
    end
    img(md, plot("parity", "final eval loss per preset (1 dp, 2 diloco, 3 streaming, 4 decoupled)", "preset",
      "eval loss", { ours, ref }, { style = "points pt 7 ps 2" }), "parity")
  else
    p("(not run yet: `diloco-lua scripts/experiments/run.lua parity`)")
  end
end)

group(want.quality or want.bytes or result("dp"), "Quality: the gap to data parallel", function()
  local base = loss("dp")
  p("Final eval loss, and its gap to `dp` (%s), for outer learning rates 0.4 / 0.7 / 1.0 (Nesterov,", f4(base))
  p("momentum 0.9) and H = 24 / 96. streaming: 4 balanced fragments, tau = 2, alpha = 0.5;")
  p("decoupled: 4 fragments, tau = 2, quorum 1, adaptive grace, tokens²/steps, RDA.")
  p("")
  head("preset", "H", "lr 0.4", "lr 0.7", "lr 1.0")
  local best = {}
  for _, pr in ipairs { "diloco", "streaming", "decoupled" } do
    for _, H in ipairs(HS) do
      local cells = {}
      for _, lr in ipairs(LRS) do
        local name = string.format("%s-lr%.1f-H%d", pr, lr, H)
        local l = loss(name)
        cells[#cells + 1] = loss_cell(l, base)
        if l and (not best[pr] or l < best[pr].loss) then best[pr] = { loss = l, name = name } end
      end
      p("| %s | %d | %s |", pr, H, table.concat(cells, " | "))
    end
  end
  p("")
  local cs = { curve("dp", "dp") }
  for _, pr in ipairs { "diloco", "streaming", "decoupled" } do
    if best[pr] then
      p("Best %s: `%s`, %s (%s from dp).", pr, best[pr].name, f4(best[pr].loss), pct(best[pr].loss, base))
      cs[#cs + 1] = curve(best[pr].name, best[pr].name)
    end
  end
  loss_plot("quality", "global eval loss, best setting of each preset", cs)
end)

group(want.gap or result("decoupled-lr0.7-H6"), "Closing the gap: more frequent syncs", function()
  local base = loss("dp")
  p("decoupled (4 fragments, tau = 2) with H = 6 and 12 beside H = 24 and 96; gap to dp (%s).", f4(base))
  p("")
  head("H", "lr 0.7", "lr 1.0", "lr 0.7, alpha 0.5", "lr 0.7, tau 0", "bytes up (lr 0.7)")
  local cs = { curve("dp", "dp") }
  for _, H in ipairs { 6, 12, 24, 96 } do
    local cells = {}
    for _, lr in ipairs { 0.7, 1.0 } do
      cells[#cells + 1] = loss_cell(loss(string.format("decoupled-lr%.1f-H%d", lr, H)), base)
    end
    local r7 = result(string.format("decoupled-lr0.7-H%d", H))
    p("| %d | %s | %s | %s | %s |", H, table.concat(cells, " | "),
      loss_cell(loss(string.format("decoupled-lr0.7-H%d-a0.5", H)), base),
      loss_cell(loss(string.format("decoupled-lr0.7-H%d-t0", H)), base), human(r7 and r7.summary.bytes_up))
    cs[#cs + 1] = curve(string.format("decoupled-lr0.7-H%d", H), string.format("decoupled H %d, lr 0.7", H))
  end
  local around = {}
  for _, v in ipairs { { "a0.75", "alpha 0.75" }, { "a0.5-t1", "alpha 0.5, tau 1" }, { "a0.5-lr1.0", "alpha 0.5, outer lr 1.0" },
      { "a0.5-lr0.4", "alpha 0.5, outer lr 0.4" } } do
    note_run(around, v[2], "decoupled-H12-" .. v[1], base)
  end
  if #around > 0 then
    p("")
    p("Around the best (H = 12, lr 0.7 unless stated): %s.", table.concat(around, "; "))
  end
  local around2 = {}
  for _, v in ipairs(AROUND) do
    note_run(around2, v[3], v[1], base)
  end
  note_run(around2, "H = 6 and outer lr 0.3", "decoupled-H6-a0.5-lr0.3", base)
  if #around2 > 0 then
    p("")
    p("Around H = 12, alpha 0.5, outer lr 0.4 (momentum 0.9, RDA unless stated): %s.", table.concat(around2, "; "))
  end
  local t0a = result("decoupled-lr0.7-H12-t0-a0.5")
  if t0a then
    p("")
    p("H = 12, lr 0.7, tau = 0 and alpha = 0.5 together: %s (%s).", f4(t0a.summary.final_eval_loss),
      pct(t0a.summary.final_eval_loss, base))
    cs[#cs + 1] = curve("decoupled-lr0.7-H12-t0-a0.5", "decoupled H 12, tau 0, alpha 0.5")
  end
  loss_plot("gap", "decoupled: sync period against the gap to dp", cs)
end)

group(want.budget or result("dp-steps1200"), "Closing the gap: a larger token budget", function()
  local function tok(steps) return 4 * steps * 16 * 64 end
  p("dp, the best decoupled setting (H = 12, alpha = 0.5, outer lr 0.4; 4 fragments, tau = 2,")
  p("20 ms links) and diloco (H = 24, outer lr 0.7, ideal links) at 1x, 2x, 4x and 8x the tokens:")
  p("%d, %d, %d and %d steps per island,", STEPS, BUDGETS[1], BUDGETS[2], BUDGETS[3])
  p("**%s, %s, %s and %s tokens per run**, seed 0;", tostring(tok(STEPS)),
    tostring(tok(BUDGETS[1])), tostring(tok(BUDGETS[2])), tostring(tok(BUDGETS[3])))
  p("otherwise the settings of the 1x runs (`dp`, `decoupled-H12-a0.5-lr0.4`, `diloco-lr0.7-H24`).")
  p("The inner cosine spans each run's steps (3e-3 to 3e-4; `sim` sets its length to the island's")
  p("steps); the warm-up is the recipe default min(100, steps / 10): 60 steps at 1x, 100 at the")
  p("others. The train split holds 2,402,304 tokens (2346 batches of 16 x 64), so the budgets make")
  p("about 1, 2, 4 and 8 passes over it (each island over its quarter).")
  p("")
  p("The last two columns: the setting that was best at 1x, H = 6, alpha = 0.5, outer lr 0.3 (chosen")
  p("at 1x with this seed, then run at 2x and 4x unchanged).")
  p("")
  head("budget (tokens)", "steps per island", "dp", "decoupled", "gap", "diloco", "gap", "decoupled H 6, lr 0.3", "gap")
  local gaps = { { title = "decoupled H 12, alpha 0.5, lr 0.4", points = {} },
    { title = "diloco H 24, lr 0.7", points = {} }, { title = "decoupled H 6, alpha 0.5, lr 0.3", points = {} } }
  local cs = {}
  local lo, hi
  for _, steps in ipairs { STEPS, BUDGETS[1], BUDGETS[2], BUDGETS[3] } do
    local sfx = steps == STEPS and "" or string.format("-steps%d", steps)
    local base = loss("dp" .. sfx)
    local x = tok(steps) / 1e6
    local row = { tostring(tok(steps)), tostring(steps), f4(base) }
    for i, name in ipairs { "decoupled-H12-a0.5-lr0.4", "diloco-lr0.7-H24", "decoupled-H6-a0.5-lr0.3" } do
      local l = loss(name .. sfx)
      row[#row + 1] = f4(l)
      row[#row + 1] = pct(l, base)
      if l and base then
        gaps[i].points[#gaps[i].points + 1] = { x, 100 * (l - base) / base }
        lo, hi = math.min(lo or x, x), math.max(hi or x, x)
      end
    end
    p("| %s |", table.concat(row, " | "))
    local mult = string.format("%dx", steps // STEPS)
    cs[#cs + 1] = curve("dp" .. sfx, "dp, " .. mult)
    cs[#cs + 1] = curve("decoupled-H12-a0.5-lr0.4" .. sfx, "decoupled, " .. mult)
  end
  if lo then gaps[#gaps + 1] = { title = "goal: 3%", points = { { lo, 3 }, { hi, 3 } } } end
  img(md, plot("budget", "gap to dp against the token budget", "tokens per run (millions)", "gap to dp (%)", gaps,
    { yrange = "[0:*]" }), "budget")
  loss_plot("budget-curves", "global eval loss at 1x to 8x the tokens: dp and decoupled", cs)
end)

group(want.codecs or result("decoupled-int4"), "Uplink codecs: int4 and E3M0 against f32, error feedback off and on", function()
  local f32 = result("decoupled-lr0.7-H24")
  local base = loss("decoupled-lr0.7-H24")
  p("decoupled, outer lr 0.7, H = 24, same seed; f32 uplink: %s. Goal: within 1%% of f32.", f4(base))
  p("")
  head("codec", "error feedback", "final eval loss", "vs f32", "bytes up")
  p("| f32 | — | %s | — | %s |", f4(base), human(f32 and f32.summary.bytes_up))
  local cs = { curve("decoupled-lr0.7-H24", "f32") }
  for _, c in ipairs { "int4", "e3m0" } do
    for _, ef in ipairs { false, true } do
      local name = string.format("decoupled-%s%s", c, ef and "-ef" or "")
      local r = result(name)
      local l = r and r.summary.final_eval_loss
      p("| %s | %s | %s | %s | %s |", c, ef and "on" or "off", f4(l), pct(l, base), human(r and r.summary.bytes_up))
      cs[#cs + 1] = curve(name, c .. (ef and " + error feedback" or ""))
    end
  end
  loss_plot("codecs", "global eval loss by uplink codec (decoupled, H 24)", cs)
end)

group(want.rda or result("m8-rda"), "RDA against the weighted mean at M = 8", function()
  p("decoupled with 8 islands of 300 steps (the same %s tokens), outer lr 0.7, H = 24.", tostring(TOKENS))
  p("")
  head("merge", "final eval loss")
  local cs = {}
  for _, m in ipairs { "rda", "mean" } do
    p("| %s | %s |", m, f4(loss("m8-" .. m)))
    cs[#cs + 1] = curve("m8-" .. m, m)
  end
  loss_plot("rda", "M = 8: RDA vs mean", cs)
end)

group(want.mixed or result("mixed-K1"), "Mixed hardware: two islands at 1x, two at 0.5x", function()
  p("recipes/mixed.lua: 800 virtual seconds (the fast islands train 800 steps, the slow ones 400: 2400")
  p("steps in all, the same tokens), decoupled with quorum 1 and adaptive grace against quorum = all")
  p("(still non-blocking: every round waits for all four, the fast islands keep training and a later")
  p("contribution of theirs waits for the next round, docs/algorithm.md §4.2), and blocking diloco")
  p("(H = 24), where the fast islands wait.")
  local k1, ka, kd = result("mixed-K1"), result("mixed-Kall"), result("mixed-diloco")
  local target
  if ka then target = ka.summary.final_eval_loss end
  local function reach(r)
    if not (r and target) then return nil end
    for _, e in ipairs(r.evals) do
      if e.loss <= target * 1.0005 then return e.virtual_s end
    end
  end
  p("Target loss: what quorum = all reaches at the end, %s.", f4(target))
  p("")
  head("quorum", "final eval loss", "virtual s to the target", "idle share per island (1, 2 fast; 3, 4 slow)")
  for _, pair in ipairs { { "1", k1 }, { "all", ka }, { "all (blocking diloco)", kd } } do
    local r = pair[2]
    local idle = {}
    for i, x in ipairs(r and r.summary.idle or {}) do idle[i] = string.format("%.1f%%", 100 * x) end
    local t = reach(r)
    p("| %s | %s | %s | %s |", pair[1], f4(r and r.summary.final_eval_loss), t and string.format("%.0f", t) or "—",
      table.concat(idle, ", "))
  end
  loss_plot("mixed", "mixed hardware: global eval loss against virtual time",
    { curve("mixed-K1", "quorum 1, adaptive grace", "time"), curve("mixed-Kall", "quorum all", "time"),
      curve("mixed-diloco", "blocking diloco", "time") }, "virtual seconds")
end)

group(want.bytes or result("dp"), "Bytes exchanged per preset", function()
  p("Link bytes of each run (payload and a 64-byte frame per message), per direction, against dp")
  p("(outer lr 0.7). Up = islands to the syncer (outer gradients, or gradients for dp); down = the syncer to")
  p("the islands (merged fragments, or averaged gradients).")
  p("")
  head("preset", "H", "up", "down", "up vs dp", "down vs dp")
  local dp = result("dp")
  local du, dd = dp and dp.summary.bytes_up, dp and dp.summary.bytes_down
  p("| dp | 1 | %s | %s | 1x | 1x |", human(du), human(dd))
  local bars = { { title = "up", points = {} }, { title = "down", points = {} } }
  local k = 0
  if du then
    k = 1
    bars[1].points[1], bars[2].points[1] = { 0.85, du }, { 1.15, dd }
  end
  for _, pr in ipairs { "diloco", "streaming", "decoupled" } do
    for _, H in ipairs(HS) do
      local r = result(string.format("%s-lr0.7-H%d", pr, H))
      if r then
        local u, d = r.summary.bytes_up, r.summary.bytes_down
        p("| %s | %d | %s | %s | 1/%.0f | 1/%.0f |", pr, H, human(u), human(d), du and du / u or 0, dd and dd / d or 0)
        k = k + 1
        bars[1].points[#bars[1].points + 1] = { k - 0.15, u }
        bars[2].points[#bars[2].points + 1] = { k + 0.15, d }
      end
    end
  end
  img(md, plot("bytes", "bytes per run: 1 dp, then diloco/streaming/decoupled at H 24, 96", "run", "bytes",
    bars, { logy = true, style = "impulses lw 12" }), "bytes")
end)

group(want.chaos or result("chaos-decoupled"), "Failures: each island down 20% of the time", function()
  p("recipes/chaos.lua: each island fails with exponential times between failures (mean 60 s) and")
  p("stays down 15 s (seeded schedule, seed 7), over 600 virtual seconds: down 20% of the time on")
  p("average (the shares drawn are in the table). A restarted island gets the global model and a")
  p("fresh AdamW and rejoins in step (docs/sim.md). A killed island's connection drops at once, so the")
  p("syncer stops waiting for it at once, in both presets. Goodput and uptime as docs/algorithm.md §7.")
  p("")
  head("preset", "final eval loss", "goodput", "uptime", "steps trained", "down share per island", "idle share per island")
  for _, pr in ipairs { "decoupled", "diloco" } do
    local r = result("chaos-" .. pr)
    local s = r and r.summary
    local down, idle = {}, {}
    for i, l in ipairs(s and s.per_learner or {}) do
      down[i] = string.format("%.0f%%", 100 * l.down)
      idle[i] = string.format("%.1f%%", 100 * l.idle)
    end
    p("| %s | %s | %s | %s | %s | %s | %s |", pr, f4(s and s.final_eval_loss),
      s and string.format("%.1f%%", 100 * s.goodput) or "—", s and string.format("%.1f%%", 100 * s.uptime) or "—",
      s and tostring(s.steps) or "—", table.concat(down, ", "), table.concat(idle, ", "))
  end
  loss_plot("chaos", "under failures: global eval loss against virtual time",
    { curve("chaos-decoupled", "decoupled", "time"), curve("chaos-diloco", "diloco (blocking)", "time") },
    "virtual seconds")
end)

local notes = read(root .. "/scripts/experiments/notes.md")
if notes then p(notes) end
write(root .. "/docs/experiments.md", table.concat(md, "\n") .. "\n")
io.stderr:write("wrote docs/experiments.md\n")
