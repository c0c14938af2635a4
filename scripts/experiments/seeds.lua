-- Held-out seeds for the claims of docs/experiments.md: the settings chosen there on seed 0
-- (the best of each preset's grid, the codecs, RDA against the mean at M = 8) run again on
-- other seeds (model init and data order), reported as mean ± standard deviation, and each
-- claim checked against the spread: a difference holds when it is larger than twice the
-- standard deviation of the per-seed differences (paired by seed).  Writes its section of
-- docs/experiments.md (between the markers "seeds begin" and "seeds end"; the rest of the
-- file is scripts/experiments/run.lua's) and docs/experiments/seeds.png.
--
--   diloco-lua scripts/experiments/seeds.lua [--seeds 1,2,3] [--budget 1|4] [--jobs N] [--build DIR] [--report-only]
--
-- Runs land in runs/experiments/seeds/NAME-sSEED[-bB]/ and are reused when their command
-- line is unchanged.  Token budget: 4 islands x 600 steps x 1024 tokens = 2,457,600 tokens
-- per run at --budget 1 (M = 8: 8 x 300 steps), 4x that at --budget 4; one compute thread
-- per run, --jobs (default 2) side by side.
local diloco = require "diloco"

local root = (arg[0]:match("^(.*)/scripts/experiments/seeds%.lua$") or ".")
local seeds, budgets, jobs, build, report_only = { 1, 2, 3 }, { 1 }, 2, root .. "/build", false
do
  local function ints(s)
    local out = {}
    for x in tostring(s):gmatch("[^,]+") do
      local v = math.tointeger(tonumber(x))
      if not v or v < 0 then error("expected integers >= 0 separated by commas, got " .. tostring(s), 0) end
      out[#out + 1] = v
    end
    return out
  end
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--seeds" then seeds, i = ints(arg[i + 1]), i + 1
    elseif a == "--budget" then budgets, i = ints(arg[i + 1]), i + 1
    elseif a == "--jobs" then jobs, i = tonumber(arg[i + 1]), i + 1
    elseif a == "--build" then build, i = arg[i + 1], i + 1
    elseif a == "--report-only" then report_only = true
    else error("unknown argument " .. a .. " (expected --seeds, --budget, --jobs, --build, --report-only)", 0) end
    i = i + 1
  end
end

local EXE = build .. "/diloco-lua"
local RUNS = root .. "/runs/experiments/seeds"
local DOCS = root .. "/docs/experiments"
local STEPS = 600
local BASE = root .. "/recipes/decoupled.lua"
local COMMON = { "threads=1", "eval.every=0", "eval.batches=32", "checkpoint.minutes=0" }
local IDEAL = { "islands.latency=0", "islands.bandwidth=inf" }

-- The settings, as chosen on seed 0 (docs/experiments.md): name, label, --set list
-- (steps are added per budget; M = 8 runs half the steps per island, the same tokens).
-- at4: also run at budgets above 1 (the others, codecs and RDA, are 1x claims).
local SETTINGS = {
  { "dp", "dp", { "sync.preset=dp", IDEAL[1], IDEAL[2] }, at4 = true },
  { "diloco", "diloco (H 24, lr 0.7)", { "sync.preset=diloco", "outer.lr=0.7", "sync.H=24", IDEAL[1], IDEAL[2] },
    at4 = true },
  { "streaming", "streaming (H 24, lr 0.7)", { "sync.preset=streaming", "outer.lr=0.7", "sync.H=24" }, at4 = true },
  { "decoupled", "decoupled (the preset: H 24, lr 0.7, f32)", { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=24" } },
  { "decoupled-best", "decoupled (the best at 1x: H 6, alpha 0.5, lr 0.3)",
    { "sync.preset=decoupled", "sync.H=6", "sync.alpha=0.5", "outer.lr=0.3" }, at4 = true },
  { "int4", "decoupled, int4 up", { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=24", "sync.codec=int4" } },
  { "e3m0", "decoupled, E3M0 up", { "sync.preset=decoupled", "outer.lr=0.7", "sync.H=24", "sync.codec=e3m0" } },
  { "m8-rda", "decoupled, M = 8, RDA", { "sync.preset=decoupled", "islands.count=8", "sync.merge=rda" }, 2 },
  { "m8-mean", "decoupled, M = 8, weighted mean", { "sync.preset=decoupled", "islands.count=8", "sync.merge=mean" }, 2 },
}
-- The claims: a against b, and what the docs say of them.
local CLAIMS = {
  { "decoupled", "dp", "decoupled's gap to dp" },
  { "decoupled-best", "dp", "the best decoupled setting's gap to dp" },
  { "diloco", "dp", "diloco's gap to dp" },
  { "streaming", "dp", "streaming's gap to dp" },
  { "decoupled", "diloco", "decoupled against diloco" },
  { "int4", "decoupled", "int4 against f32" },
  { "e3m0", "decoupled", "E3M0 against f32" },
  { "m8-rda", "m8-mean", "RDA against the weighted mean at M = 8" },
}

local C = dofile(root .. "/scripts/experiments/common.lua")
local quote, read, write, mean_sd = C.quote, C.read, C.write, C.mean_sd

local runs = {}
for _, b in ipairs(budgets) do
  for _, st in ipairs(SETTINGS) do
    for _, seed in ipairs((b == 1 or st.at4) and seeds or {}) do
      local name = string.format("%s-s%d%s", st[1], seed, b ~= 1 and "-b" .. b or "")
      local sets = {}
      for _, s in ipairs(COMMON) do sets[#sets + 1] = s end
      sets[#sets + 1] = "steps=" .. (b * STEPS) // (st[4] or 1)
      sets[#sets + 1] = "seed=" .. seed
      for _, s in ipairs(st[3]) do sets[#sets + 1] = s end
      runs[#runs + 1] = { name = name, setting = st[1], seed = seed, budget = b, sets = sets }
    end
  end
end

local function command(r)
  local parts = { quote(EXE), "sim", quote(BASE), "--out", quote(RUNS .. "/" .. r.name), "--quiet", "--overwrite" }
  for _, s in ipairs(r.sets) do parts[#parts + 1] = "--set " .. quote(s) end
  return table.concat(parts, " ")
end

local function summary_of(r)
  local text = read(RUNS .. "/" .. r.name .. "/metrics.jsonl")
  if not text then return nil end
  local last
  for line in text:gmatch("[^\n]+") do last = line end
  local s = last and diloco.json_decode(last)
  return type(s) == "table" and s.event == "summary" and s or nil
end

local function done(r)
  local function strip(c) return c and (c:gsub("^'[^']*' ", "")) end
  return strip(read(RUNS .. "/" .. r.name .. "/command.txt")) == strip(command(r)) and summary_of(r) ~= nil
end

os.execute("mkdir -p " .. quote(RUNS) .. " " .. quote(DOCS))
local todo = {}
for _, r in ipairs(runs) do
  if not report_only and not done(r) then todo[#todo + 1] = r end
end
if #todo > 0 then
  local list = {}
  for _, r in ipairs(todo) do
    local dir = RUNS .. "/" .. r.name
    list[#list + 1] = string.format("mkdir -p %s && %s > /dev/null 2> %s/stderr.txt && printf %%s %s > %s/command.txt; "
      .. "echo done %s", quote(dir), command(r), quote(dir), quote(command(r)), quote(dir), r.name)
  end
  write(RUNS .. "/jobs.txt", table.concat(list, "\n") .. "\n")
  io.stderr:write(string.format("running %d sims, %d at a time\n", #todo, jobs))
  os.execute(string.format("cd %s && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 xargs -P %d -d '\\n' -I{} sh -c {} < %s",
    quote(root), jobs, quote(RUNS .. "/jobs.txt")))
end

-- ---- the report ----

local md = { "<!-- seeds begin: scripts/experiments/seeds.lua writes this section -->", "",
  "## Held-out seeds: do the claims hold beyond the spread?", "",
  string.format("Generated by `diloco-lua scripts/experiments/seeds.lua --seeds %s --budget %s` (%s); edit that "
    .. "script, not this section.", table.concat(seeds, ","), table.concat(budgets, ","), os.date("!%Y-%m-%d")),
  "The settings were chosen on seed 0 in the sections above; here each runs again on the seeds "
    .. table.concat(seeds, ", ") .. " (model initialisation and data order; the eval split is fixed), "
    .. "`sim` on recipes/decoupled.lua, 4 islands (M = 8: 8 islands of half the steps), "
    .. "2,457,600 tokens per run at 1x (4 x 600 steps x 1024 tokens; at 4x: dp, diloco, streaming and the best "
    .. "decoupled setting, with the inner cosine stretched over the longer run), one thread per run. "
    .. "Final eval loss on the 32-batch subset and on the whole eval split (2,239 windows), mean ± standard "
    .. "deviation over the seeds; goodput likewise.", "" }
local results = {}
for _, b in ipairs(budgets) do
  md[#md + 1] = string.format("### %dx the tokens (%s tokens per run)", b, tostring(2457600 * b))
  md[#md + 1] = ""
  md[#md + 1] = "| setting | final eval (32 batches) | final eval (whole split) | goodput | seeds |"
  md[#md + 1] = "|---|---|---|---|---|"
  results[b] = {}
  for _, st in ipairs(SETTINGS) do
    local loss, all, gp, per = {}, {}, {}, {}
    for _, r in ipairs(runs) do
      if r.setting == st[1] and r.budget == b then
        local s = summary_of(r)
        if s and s.final_eval_loss then
          loss[#loss + 1], gp[#gp + 1] = s.final_eval_loss, s.goodput
          all[#all + 1] = s.final_eval_loss_all
          per[r.seed] = s.final_eval_loss
        end
      end
    end
    results[b][st[1]] = per
    local function ms(xs, fmt)
      local m, sd = mean_sd(xs)
      if not m then return "—" end
      return sd and string.format(fmt .. " ± " .. fmt, m, sd) or string.format(fmt, m)
    end
    local gpp = {}
    for i, g in ipairs(gp) do gpp[i] = 100 * g end
    if b == 1 or st.at4 then
      md[#md + 1] = string.format("| %s | %s | %s | %s%% | %d |", st[2], ms(loss, "%.4f"), ms(all, "%.4f"),
        ms(gpp, "%.1f"), #loss)
    end
  end
  md[#md + 1] = ""
  md[#md + 1] = "| claim | a − b, per seed | mean ± sd (relative to b) | beyond the spread? | within 3% of b? |"
  md[#md + 1] = "|---|---|---|---|---|"
  for _, c in ipairs(CLAIMS) do
    local a, bb = results[b][c[1]], results[b][c[2]]
    if next(a) and next(bb) then
    local d, rel, texts = {}, {}, {}
    for _, seed in ipairs(seeds) do
      if a[seed] and bb[seed] then
        d[#d + 1] = a[seed] - bb[seed]
        rel[#rel + 1] = 100 * (a[seed] - bb[seed]) / bb[seed]
        texts[#texts + 1] = string.format("%+.4f", a[seed] - bb[seed])
      end
    end
    local m, sd = mean_sd(d)
    local rm, rsd = mean_sd(rel)
    local verdict, within = "—", "—"
    if m and sd then
      verdict = math.abs(m) > 2 * sd and (m < 0 and "yes: a is lower" or "yes: a is higher") or "no"
      -- within 3% (the goal against dp) only when the whole spread is: |mean| + 2 sd of
      -- the relative differences below 3%; outside when the spread lies beyond 3% whole
      within = (math.abs(rm) + 2 * rsd < 3 and "yes") or ((rm - 2 * rsd > 3 or rm + 2 * rsd < -3) and "no")
        or "not beyond the spread"
    end
    md[#md + 1] = string.format("| %s | %s | %s | %s | %s |", c[3], table.concat(texts, ", "),
      m and string.format("%+.4f ± %.4f (%+.2f%% ± %.2f%%)", m, sd or 0, rm, rsd or 0) or "—", verdict, within)
    end
  end
  md[#md + 1] = ""
end
md[#md + 1] = "A claim holds beyond the spread when its mean difference is more than twice the standard "
  .. "deviation of the per-seed differences; with three seeds that is a rough test, and a \"no\" says the "
  .. "seeds do not separate the two settings, not that they are equal. \"Within 3% of b\" is yes when the "
  .. "relative difference lies within ±3% over its whole spread (|mean| + 2 sd < 3%), no when the spread lies "
  .. "beyond 3% whole, and \"not beyond the spread\" otherwise (the goal against dp is within 3%)."
md[#md + 1] = ""
md[#md + 1] = "![seeds](experiments/seeds.png)"
md[#md + 1] = ""
-- the runs of the first seed and budget as `diloco-lua compare` prints them: the table is
-- that command's own output, so a reader who reruns it on these run directories gets it
do
  local seed, b = seeds[1], budgets[1]
  local dirs, names = {}, {}
  for _, r in ipairs(runs) do
    if r.seed == seed and r.budget == b and summary_of(r) then
      dirs[#dirs + 1] = quote(RUNS .. "/" .. r.name)
      names[#names + 1] = "runs/experiments/seeds/" .. r.name
    end
  end
  local p = #dirs > 0 and io.popen(quote(EXE) .. " compare " .. table.concat(dirs, " ") .. " --markdown 2>/dev/null")
  local text = p and p:read("a")
  if p then p:close() end
  if text and text:find("|", 1, true) then
    md[#md + 1] = string.format("### Every run of seed %d at %dx, as `diloco-lua compare` shows it", seed, b)
    md[#md + 1] = ""
    md[#md + 1] = "```sh norun"
    md[#md + 1] = "diloco-lua compare " .. table.concat(names, " ") .. " --markdown"
    md[#md + 1] = "```"
    md[#md + 1] = ""
    md[#md + 1] = (text:gsub("\n+$", ""))
    md[#md + 1] = ""
  end
end
md[#md + 1] = "<!-- seeds end -->"

-- the plot: each setting's final eval loss per seed, and the mean
local dat = DOCS .. "/.seeds.dat"
local lines, k = {}, 0
local b1 = budgets[1]
for _, st in ipairs(SETTINGS) do
  k = k + 1
  local xs = {}
  for _, seed in ipairs(seeds) do
    local v = results[b1][st[1]][seed]
    if v then
      xs[#xs + 1] = v
      lines[#lines + 1] = string.format("%d %.6f \"%s\"", k, v, st[1])
    end
  end
end
write(dat, table.concat(lines, "\n") .. "\n")
local means = {}
k = 0
for _, st in ipairs(SETTINGS) do
  k = k + 1
  local xs = {}
  for _, seed in ipairs(seeds) do xs[#xs + 1] = results[b1][st[1]][seed] end
  local m, sd = mean_sd(xs)
  if m then means[#means + 1] = string.format("%d %.6f %.6f \"%s\"", k, m, sd or 0, st[1]) end
end
local dat2 = DOCS .. "/.seeds-mean.dat"
write(dat2, table.concat(means, "\n") .. "\n")
local gp = io.popen("gnuplot", "w")
if gp then
  gp:write(table.concat({
    "set terminal pngcairo noenhanced size 900,560",
    "set output " .. quote(DOCS .. "/seeds.png"),
    string.format("set title 'final eval loss on seeds %s (%dx tokens): each seed, and mean ± sd'",
      table.concat(seeds, ", "), b1),
    "set ylabel 'final eval loss (nats per byte)'", "set grid ytics", "set xtics rotate by -30",
    string.format("set xrange [0.5:%d.5]", #SETTINGS), "set key top left",
    string.format("plot %s using 1:2:xtic(3) with points pt 7 ps 1 title 'a seed', "
      .. "%s using 1:2:3 with yerrorbars lw 2 pt 5 ps 1.4 title 'mean ± sd'", quote(dat), quote(dat2)),
  }, "\n") .. "\n")
  gp:close()
end
os.remove(dat)
os.remove(dat2)

-- into docs/experiments.md, between the markers (appended the first time)
local path = root .. "/docs/experiments.md"
C.write_section(path, "seeds", table.concat(md, "\n") .. "\n")
io.stderr:write("wrote " .. path .. " (its seeds section) and " .. DOCS .. "/seeds.png\n")
