-- diloco.goodput CLI: the `diloco-lua goodput` subcommand, a table of the goodput simulator
-- (diloco.goodput{...}, core/goodput.h, docs/goodput.md) over seeds and an optional sweep,
-- and a gnuplot PNG of goodput against chips.
--
--   diloco-lua goodput --chips 1.2e6 --mtbi 1y --learners 8
--   diloco-lua goodput --sweep chips=1e5,3e5,1.2e6,2.4e6 --plot goodput.png
--
-- main(args, parse) returns the exit status; errors are raised as {usage = msg} (exit 2)
-- or {diloco_error = msg} (exit 1), which diloco.cli reports.
local diloco = require "diloco"
local M = {}

-- The options and their help text are diloco.cli's M.commands.goodput.
local function usage(fmt, ...) error({ usage = string.format(fmt, ...) }, 0) end

local SWEEP_KEYS = { chips = true, learners = true, mtbi = true, repair = true, downscale = true,
  upscale = true, pause = true, step = true, checkpoint = true, restart = true, slice_chips = true,
  syncer_shards = true, syncer_mtbf = true, syncer_restart = true, syncer_checkpoint = true, standby = true,
  lease = true }
local INTEGER_KEYS = { chips = true, learners = true, slice_chips = true, seed = true, syncer_shards = true,
  standby = true }
-- the syncer's options: decoupled only (core/goodput.h, "The syncer")
local SYNCER_KEYS = { "syncer_shards", "syncer_mtbf", "syncer_restart", "syncer_checkpoint", "standby", "lease" }

-- A parameter value from the command line: integers for counts ("1.2e6" is 1200000),
-- durations as given (the binding parses units), other strings as they are.
local function value(key, s)
  if INTEGER_KEYS[key] then
    local n = tonumber(s)
    if not n or n ~= math.floor(n) or n < 0 or n >= 2 ^ 53 then
      usage("%s = %s, expected a whole number (1200000 or 1.2e6)", key, s)
    end
    return math.tointeger(n)
  end
  if key == "policy" or key == "pause" then return s end
  local d, e = diloco.goodput_duration(tonumber(s) or s)
  if not d then usage("%s = %s", key, e) end
  return d
end

local function mean_sd(xs)
  local s, n = 0, #xs
  for _, x in ipairs(xs) do s = s + x end
  local m, v = s / n, 0
  for _, x in ipairs(xs) do v = v + (x - m) ^ 2 end
  return m, n > 1 and math.sqrt(v / (n - 1)) or 0
end

-- Runs params over seeds; returns goodput and uptime mean, sd, and the first result.
local function over_seeds(params, seed, seeds, want_series)
  local g, u, first = {}, {}, nil
  for k = 0, seeds - 1 do
    local p = {}
    for key, v in pairs(params) do p[key] = v end
    p.seed = seed + k
    p.series = want_series and k == 0
    local ok, r = pcall(diloco.goodput, p)
    if not ok then usage("%s", tostring(r)) end
    g[#g + 1], u[#u + 1] = r.goodput, r.uptime
    first = first or r
  end
  local gm, gs = mean_sd(g)
  local um, us = mean_sd(u)
  return { goodput = gm, goodput_sd = gs, uptime = um, uptime_sd = us, first = first }
end

local function fmt_chips(n)
  if n >= 1e6 then return string.format("%gM", n / 1e6) end
  if n >= 1e3 then return string.format("%gk", n / 1e3) end
  return tostring(n)
end

local function plot(file, rows, policies)
  local gp = io.popen("command -v gnuplot", "r")
  local where = gp and gp:read("l")
  if gp then gp:close() end
  if not where or where == "" then
    error({ diloco_error = "--plot: gnuplot not found (scripts/setup installs the Debian package gnuplot-nox); the table above is complete" }, 0)
  end
  local data = os.tmpname()
  local f = assert(io.open(data, "w"))
  for bi, pol in ipairs(policies) do
    f:write("# ", pol.label, "\n")
    for _, row in ipairs(rows) do
      if row.block == bi then
        f:write(string.format("%d %.6f %.6f\n", row.chips, 100 * row.goodput, 100 * row.goodput_sd))
      end
    end
    f:write("\n\n")
  end
  f:close()
  local plots = {}
  for bi, pol in ipairs(policies) do
    plots[#plots + 1] = string.format("'%s' index %d using 1:2:3 with yerrorlines title '%s'", data, bi - 1, pol.label)
  end
  local script = table.concat({
    "set terminal png size 900,600",
    string.format("set output '%s'", file:gsub("'", "''")),
    "set logscale x", "set xlabel 'chips'", "set ylabel 'goodput (%)'", "set yrange [0:100]",
    "set key bottom left", "set grid",
    "set title 'Goodput against cluster size (MTBI per chip as given)'",
    "plot " .. table.concat(plots, ", "),
  }, "\n")
  local p = io.popen("gnuplot 2>&1", "w")
  p:write(script, "\n")
  local ok = p:close()
  os.remove(data)
  if not ok then error({ diloco_error = "--plot: gnuplot failed writing " .. file }, 0) end
end

function M.main(args, parse)
  local opts, pos = parse(args)
  if #pos > 0 then usage("unexpected argument '%s'", pos[1]) end
  local params = {}
  for _, s in ipairs(opts.set or {}) do
    local k, v = s:match("^([%w_]+)=(.+)$")
    if not k then usage("--set %s: expected KEY=VALUE", s) end
    params[k] = value(k, v)
  end
  if opts.chips then params.chips = value("chips", opts.chips) end
  if opts.mtbi then params.mtbi = value("mtbi", opts.mtbi) end
  if opts.days then
    local d = tonumber(opts.days)
    if not d or d <= 0 then usage("--days %s: expected a number of days > 0", opts.days) end
    params.duration = d * 86400
  end
  params.duration = params.duration or 30 * 86400
  local learners = opts.learners and value("learners", opts.learners) or 8
  local seed = opts.seed and value("seed", opts.seed) or 0
  local seeds = opts.seeds and math.tointeger(tonumber(opts.seeds)) or 10
  if not seeds or seeds < 1 or seeds > 1000 then usage("--seeds %s: expected an integer in 1..1000", opts.seeds) end

  local policies
  local pol = opts.policy or "all"
  if pol == "all" then
    policies = { { policy = "dp", learners = 1, label = "dp" },
      { policy = "elastic-dp", learners = 1, label = "elastic-dp" },
      { policy = "decoupled", learners = learners, label = "decoupled M=" .. learners } }
  elseif pol == "dp" or pol == "elastic-dp" then
    if opts.learners and learners ~= 1 then usage("--learners %d with --policy %s: only decoupled has several learners", learners, pol) end
    policies = { { policy = pol, learners = 1, label = pol } }
  elseif pol == "decoupled" then
    policies = { { policy = pol, learners = learners, label = "decoupled M=" .. learners } }
  else
    usage("--policy %s: expected dp, elastic-dp, decoupled or all", pol)
  end

  local sweep_key, sweep_vals = nil, { false }
  local sweep = opts.sweep or (opts.plot and "chips=1e5,3e5,1.2e6,2.4e6")
  if sweep then
    local k, list = sweep:match("^([%w_]+)=(.+)$")
    if not k or not SWEEP_KEYS[k] then
      usage("--sweep %s: expected KEY=V1,V2,... with KEY one of chips, learners, mtbi, repair, downscale, upscale, pause, step, checkpoint, restart, slice_chips, syncer_shards, syncer_mtbf, syncer_restart, syncer_checkpoint, standby, lease", sweep)
    end
    sweep_key, sweep_vals = k, {}
    for v in list:gmatch("[^,]+") do
      sweep_vals[#sweep_vals + 1] = value(k == "pause" and "downscale" or k, v)
    end
    if opts.plot and k ~= "chips" then usage("--plot draws goodput against chips: use --sweep chips=...") end
    if k == "learners" then policies = { { policy = "decoupled", learners = learners, label = "decoupled" } } end
  end

  local rows = {}
  print(string.format("%-14s %4s %9s %-12s %10s  %-16s %-16s", "policy", "M", "chips", "mtbi",
    sweep_key and ("sweep " .. sweep_key) or "", "goodput %", "uptime %"))
  for bi, pl in ipairs(policies) do
    for _, sv in ipairs(sweep_vals) do
      local p = {}
      for k, v in pairs(params) do p[k] = v end
      p.policy, p.learners = pl.policy, pl.learners
      if sweep_key == "pause" then p.downscale, p.upscale = sv, sv
      elseif sweep_key == "learners" then p.learners = sv
      elseif sweep_key then p[sweep_key] = sv end
      if pl.policy ~= "decoupled" then -- (dp and elastic-dp model no syncer)
        for _, key in ipairs(SYNCER_KEYS) do p[key] = nil end
      end
      local r = over_seeds(p, seed, seeds, opts.series and #rows == 0)
      local pr = r.first.params
      rows[#rows + 1] = { block = bi, chips = pr.chips, goodput = r.goodput, goodput_sd = r.goodput_sd }
      print(string.format("%-14s %4d %9s %-12s %10s  %6.2f ± %-6.2f  %6.2f ± %-6.2f", pr.policy, pr.learners,
        fmt_chips(pr.chips), string.format("%gd", pr.mtbi / 86400), sweep_key and tostring(sv) or "",
        100 * r.goodput, 100 * r.goodput_sd, 100 * r.uptime, 100 * r.uptime_sd))
      if (pr.syncer_shards or 0) > 0 then
        local f = r.first
        print(string.format("  (the syncer in %d shard%s%s, each failing every %gd: seed %d had %d failure%s, %d outage%s, "
          .. "%d takeover%s, %.3f%% of the chip-time lost to them)", pr.syncer_shards, pr.syncer_shards == 1 and "" or "s",
          pr.standby == 1 and " with standbys" or "", pr.syncer_mtbf / 86400, seed, f.syncer_failures,
          f.syncer_failures == 1 and "" or "s", f.syncer_outages, f.syncer_outages == 1 and "" or "s", f.takeovers,
          f.takeovers == 1 and "" or "s", 100 * f.syncer_lost / (pr.chips * pr.duration)))
      end
      if opts.series and #rows == 1 then
        local s = r.first.series
        local f, e = io.open(opts.series, "w")
        if not f then error({ diloco_error = "--series: " .. tostring(e) }, 0) end
        f:write("# t_s\tlive_chips\tprogress_s\n")
        for i = 1, s and #s.t or 0 do f:write(string.format("%g\t%d\t%.3f\n", s.t[i], s.live_chips[i], s.progress[i])) end
        f:close()
      end
    end
  end
  print(string.format("(%d seed%s from %d, %g days; goodput = useful chip-time / allocated chip-time)",
    seeds, seeds == 1 and "" or "s", seed, params.duration / 86400))
  if opts.plot then
    plot(opts.plot, rows, policies)
    print("wrote " .. opts.plot)
  end
  return 0
end

return M
