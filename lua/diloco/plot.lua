-- diloco.plot: the `diloco-lua plot` subcommand, curves of the metrics of runs.
--
--   diloco-lua plot runs/charlm runs/charlm-lr1e-3 --out loss.png      -- loss and eval
--   diloco-lua plot runs/decoupled --events merge --y contributors --x virtual
--
-- A run directory of `diloco-lua run` with several islands is read with its learners'
-- metrics (learner-N/metrics.jsonl), and faults are marked on the x axis (M.fault_marks).
-- A curve is one (run, record kind, field) and, in a sim, one per learner (and per
-- fragment for merges): the records of the metrics file (docs/cli.md, "Metrics") whose
-- kind is among --events and that carry both the x and the y field as numbers (an
-- array counts as its length, a boolean as 0 or 1).  A `resume` record drops the points
-- of the run it resumes that came after its step (the resumed run redid them).
-- With --out the chart is a PNG drawn by gnuplot; without, text on stdout.
--
-- The pieces are usable on their own: M.read(path) -> a run (records), M.series(runs,
-- spec) -> curves, M.text_chart(curves, opts) -> text, M.gnuplot(curves, opts).
-- main(args, parse) returns the exit status; errors are raised as {usage = msg} or
-- {diloco_error = msg, code = n}, which diloco.cli reports.
local diloco = require "diloco"
local M = {}

-- Record kinds a metrics file holds, in the order the help and messages name them.
M.KINDS = { "step", "eval", "merge", "fault", "reject", "checkpoint", "resume", "summary" }
local KIND = {}
for _, k in ipairs(M.KINDS) do KIND[k] = true end

-- --x names for the fields they stand for; "time" is derived (see x_value).
M.X_ALIASES = { steps = "step", step = "step", tokens = "tokens", virtual = "virtual_s", time = "time" }
-- --y shortcuts
M.Y_ALIASES = { eval = { kind = "eval", field = "loss" } }

local function usage(fmt, ...) error({ usage = string.format(fmt, ...) }, 0) end
local function bad_input(fmt, ...) error({ diloco_error = string.format(fmt, ...), code = 2 }, 0) end
local function failed(fmt, ...) error({ diloco_error = string.format(fmt, ...), code = 1 }, 0) end

-- A field's value as a number: numbers as they are, arrays by their length, booleans
-- as 1 or 0; nil for anything else (null, strings, objects).
local function numeric(v)
  local t = type(v)
  if t == "number" then return v == v and v ~= math.huge and v ~= -math.huge and v or nil end
  if t == "boolean" then return v and 1 or 0 end
  if t == "table" and (#v > 0 or next(v) == nil) then return #v end
  return nil
end
M.numeric = numeric

-- The name a run is shown by: a run directory's name, the directory of a
-- metrics.jsonl, else the file's name without .jsonl.
local function run_label(arg, file)
  local base = file:match("([^/]+)$")
  if base == "metrics.jsonl" then
    local dir = file:match("([^/]+)/[^/]+$")
    if dir and dir ~= "." then return dir end
  end
  return (base:gsub("%.jsonl$", ""))
end

-- Reads the metrics of a run directory or a metrics file.  Returns { label, path,
-- records }; raises a usage-class error (exit 2) for a missing file, one that is not
-- metrics, or one without a record.  A line cut short (a run killed mid-write leaves
-- one; the next append starts a new line) is skipped and counted in skipped.
function M.read(arg)
  local path = arg
  local probe = io.open(arg .. "/metrics.jsonl", "r")
  if probe then
    probe:close()
    path = arg .. "/metrics.jsonl"
  end
  local f, err = io.open(path, "r")
  local text
  if f then
    text, err = f:read("a")
    f:close()
  end
  if not text then -- cannot be opened, or read (a directory)
    bad_input("%s: %s (expected a run directory of diloco-lua run or sim, or its metrics.jsonl)", arg,
      tostring(err):gsub("^[^:]*: ", ""))
  end
  local records, skipped, n = {}, 0, 0
  for line in text:gmatch("([^\n]*)\n?") do
    n = n + 1
    if line:match("%S") then
      local rec = diloco.json_decode(line)
      if type(rec) == "table" and type(rec.event) == "string" then
        records[#records + 1] = rec
      elseif line:match('^{"event":') and rec == nil then
        skipped = skipped + 1 -- cut short by a kill mid-write
      else
        bad_input('%s:%d: not a metrics line (expected JSON objects with an "event" field, one per line, as '
          .. "diloco-lua run and sim write): %s", path, n, #line > 60 and line:sub(1, 57) .. "..." or line)
      end
    end
  end
  if #records == 0 then
    bad_input("%s: no metrics records (the file is empty%s)", path, skipped > 0 and " but for lines cut short" or "")
  end
  local run = { label = run_label(arg, path), path = path, records = records, skipped = skipped, own = #records }
  if path ~= arg then M.read_learners(run, arg) end
  return run
end

-- M.read, and a note on stderr ("diloco-lua: COMMAND: ...") when it skipped lines cut short.
function M.read_noting_skips(arg, command)
  local run = M.read(arg)
  if run.skipped > 0 then
    io.stderr:write(string.format("diloco-lua: %s: %s: skipped %d line%s cut short\n", command, run.path, run.skipped,
      run.skipped == 1 and "" or "s"))
  end
  for _, note in ipairs(run.unread or {}) do io.stderr:write(string.format("diloco-lua: %s: %s\n", command, note)) end
  return run
end

-- A real run of several islands (`diloco-lua run`): its directory holds the syncer's
-- metrics (the global evals, merges, faults) and each learner's in learner-N/ (its steps'
-- losses); those are read into the run too, each record naming its learner.
function M.read_learners(run, dir)
  local found = {}
  for _, name in ipairs(diloco.listdir(dir) or {}) do
    local m = math.tointeger(tonumber(name:match("^learner%-(%d+)$") or ""))
    if m and diloco.file_id(string.format("%s/%s/metrics.jsonl", dir, name)) then found[#found + 1] = m end
  end
  table.sort(found)
  run.unread = {}
  for _, m in ipairs(found) do
    local path = string.format("%s/learner-%d/metrics.jsonl", dir, m)
    local ok, sub = pcall(M.read, path)
    if not ok then run.unread[#run.unread + 1] = string.format("%s (learner %d's losses left out)", sub.diloco_error or sub, m) end
    for _, rec in ipairs(ok and sub.records or {}) do
      if rec.event ~= "summary" then
        rec.learner = rec.learner or m
        run.records[#run.records + 1] = rec
      end
    end
    run.skipped = run.skipped + (ok and sub.skipped or 0)
  end
  run.learner_dirs = #found
  return run
end

-- Runs (M.read) of one name are told apart by the path given: each such run's label
-- becomes its path without "/metrics.jsonl".  Changes runs in place and returns them.
function M.unique_labels(runs)
  local labels = {}
  for _, run in ipairs(runs) do
    if labels[run.label] then
      for _, r in ipairs(runs) do
        if r.label == run.label then r.label = r.path:gsub("/metrics%.jsonl$", "") end
      end
    end
    labels[run.label] = true
  end
  return runs
end

-- Parses --y and --events into what to draw: a list of { kind = nil|kind, field }.
function M.parse_spec(y, events)
  local kinds
  if events then
    kinds = {}
    for k in events:gmatch("[^,]+") do
      if not KIND[k] then usage("--events %s: unknown record kind '%s' (expected %s)", events, k,
        table.concat(M.KINDS, ", ")) end
      kinds[#kinds + 1] = k
    end
    if #kinds == 0 then usage("--events '%s': expected kinds separated by commas", events) end
  end
  local ys = {}
  for item in y:gmatch("[^,]+") do
    local alias = M.Y_ALIASES[item]
    local kind, field = item:match("^([%a_]+)%.([%a_][%w_]*)$")
    if alias then
      ys[#ys + 1] = { kind = alias.kind, field = alias.field, text = item }
    elseif kind then
      if not KIND[kind] then usage("--y %s: unknown record kind '%s' (expected %s)", item, kind,
        table.concat(M.KINDS, ", ")) end
      ys[#ys + 1] = { kind = kind, field = field, text = item }
    elseif item:match("^[%a_][%w_]*$") then
      ys[#ys + 1] = { field = item, text = item }
    else
      usage("--y %s: expected FIELD or KIND.FIELD (loss, eval, grad_norm, merge.contributors, ...)", item)
    end
  end
  if #ys == 0 then usage("--y '%s': expected fields separated by commas", y) end
  return { ys = ys, kinds = kinds }
end

local function x_value(rec, xfield, t0)
  if xfield == "time" then return rec.time and rec.time - t0 end
  return numeric(rec[xfield])
end

-- The curves of runs for spec (M.parse_spec) against --x name x.  Each curve: label,
-- run, kind, field, learner, fragment, points = { {x, y}, ... } in file order.  Raises
-- a usage-class error naming what there is when nothing matches.
function M.series(runs, spec, x)
  local xfield = M.X_ALIASES[x] or x
  if not xfield:match("^[%a_][%w_]*$") then
    usage("--x %s: expected steps, tokens, time, virtual or a numeric field name", x)
  end
  local curves, by_key, groups = {}, {}, {}
  local several = #runs > 1
  for _, run in ipairs(runs) do
    local t0 = run.records[1].time or 0
    for _, rec in ipairs(run.records) do
      local kind = rec.event
      if kind == "resume" and numeric(rec.step) then
        for _, c in ipairs(curves) do
          if c.run == run then
            local kept = {}
            for _, p in ipairs(c.points) do
              if not p.step or p.step <= rec.step then kept[#kept + 1] = p end
            end
            c.points = kept
          end
        end
      end
      local wanted = spec.kinds == nil and kind ~= "summary"
      if spec.kinds then
        for _, k in ipairs(spec.kinds) do wanted = wanted or k == kind end
      end
      for _, y in ipairs(spec.ys) do
        if (y.kind == nil and wanted) or y.kind == kind then
          local xv, yv = x_value(rec, xfield, t0), numeric(rec[y.field])
          if xv and yv then
            local learner = kind ~= "merge" and math.tointeger(rec.learner) or nil
            local fragment = kind == "merge" and math.tointeger(rec.fragment) or nil
            local key = table.concat({ run.path, kind, y.field, learner or "", fragment or "" }, "\0")
            local c = by_key[key]
            if not c then
              local parts = {}
              if several then parts[#parts + 1] = run.label end
              parts[#parts + 1] = kind .. " " .. y.field
              if learner then parts[#parts + 1] = "learner " .. learner end
              if fragment then parts[#parts + 1] = "fragment " .. fragment end
              local gkey = run.path .. "\0" .. kind .. "\0" .. y.field
              if not groups[gkey] then groups[gkey] = #curves + 1 end
              c = { label = table.concat(parts, " "), run = run, kind = kind, field = y.field, learner = learner,
                fragment = fragment, points = {}, group = groups[gkey] }
              by_key[key] = c
              curves[#curves + 1] = c
            end
            c.points[#c.points + 1] = { xv, yv, step = numeric(rec.step) }
          end
        end
      end
    end
  end
  local drawn = {}
  for _, c in ipairs(curves) do
    if #c.points > 0 then drawn[#drawn + 1] = c end
  end
  -- in the order each (run, kind, field) first appears; its learners and fragments in turn
  table.sort(drawn, function(a, b)
    if a.group ~= b.group then return a.group < b.group end
    if (a.learner or 0) ~= (b.learner or 0) then return (a.learner or 0) < (b.learner or 0) end
    return (a.fragment or 0) < (b.fragment or 0)
  end)
  if #drawn == 0 then M.nothing_to_draw(runs, spec, x, xfield) end
  return drawn
end

-- The usage-class error when no record has both fields: names the kinds looked at and
-- the numeric fields they do have.
function M.nothing_to_draw(runs, spec, x, xfield)
  local fields, kinds_seen = {}, {}
  for _, run in ipairs(runs) do
    for _, rec in ipairs(run.records) do
      local kind = rec.event
      local looked = false
      for _, y in ipairs(spec.ys) do
        if y.kind == kind then looked = true end
      end
      if spec.kinds then
        for _, k in ipairs(spec.kinds) do looked = looked or k == kind end
      elseif kind ~= "summary" then
        looked = true
      end
      if looked then
        kinds_seen[kind] = true
        for k, v in pairs(rec) do
          if numeric(v) and k ~= "event" then fields[k] = true end
        end
      end
    end
  end
  local names, kinds = {}, {}
  for k in pairs(fields) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(M.KINDS) do
    if kinds_seen[k] then kinds[#kinds + 1] = k end
  end
  local ys = {}
  for _, y in ipairs(spec.ys) do ys[#ys + 1] = y.text end
  local where = #kinds == 0 and "record of the kinds asked for"
    or #kinds == 1 and kinds[1] .. " record"
    or table.concat(kinds, ", ", 1, #kinds - 1) .. " or " .. kinds[#kinds] .. " record"
  if #names > 0 and xfield ~= "time" and not fields[xfield] then
    usage("--x %s: no %s has a numeric %s (expected steps, tokens, time, virtual or a numeric field of those "
      .. "records: %s)", x, where, xfield, table.concat(names, ", "))
  end
  usage("--y %s: no %s has %s as a number next to a numeric %s (the numeric fields of those records: %s)",
    table.concat(ys, ","), where, #ys == 1 and "it" or "them", xfield, #names > 0 and table.concat(names, ", ") or "none")
end

-- ---- faults ----

-- Whether a fault record marks a fault (its begin: kill, crash, lost, pause, ...) or the
-- way back (its end, a rejoin, a recovery).
local function is_back(rec)
  return rec.begin == false or rec.kind == "joined" or rec.kind == "recovered" or rec.kind == "restart"
end

-- The faults of runs as marks on the x axis x: { {x, back = bool, text} }, in order.  A
-- fault without that field (a real run's faults carry wall times, not steps) is placed at
-- the step its learner (or, for the syncer's, any learner) had reached then: the latest
-- step record at or before its time.  A restart that did not happen is not marked.
function M.fault_marks(runs, x)
  local xfield = M.X_ALIASES[x] or x
  local marks = {}
  for _, run in ipairs(runs) do
    local t0 = run.records[1].time or 0
    local steps = {}
    for _, rec in ipairs(run.records) do
      if rec.event == "step" and rec.time and numeric(rec[xfield]) then steps[#steps + 1] = rec end
    end
    table.sort(steps, function(a, b) return a.time < b.time end)
    for _, rec in ipairs(run.records) do
      if rec.event == "fault" and not rec.skipped then
        local xv = x_value(rec, xfield, t0)
        if not xv and rec.time then
          for _, st in ipairs(steps) do
            if st.time > rec.time then break end
            if rec.learner == nil or st.learner == rec.learner then xv = numeric(st[xfield]) end
          end
        end
        if xv then
          marks[#marks + 1] = { xv, back = is_back(rec), text = tostring(rec.kind or "fault") ..
            (rec.learner and (" " .. tostring(rec.learner)) or "") }
        end
      end
    end
  end
  table.sort(marks, function(a, b) return a[1] < b[1] end)
  return marks
end

-- ---- the text chart ----

local MARKS = { "*", "+", "o", "x", "#", "@", "%", "&", "=", "~" }
M.MARKS = MARKS

local function short(v)
  if v == math.floor(v) and math.abs(v) < 1e7 then return string.format("%d", v) end
  return (string.format("%.4g", v))
end

-- The curves as text, width x height characters of plot area and axes, then a legend.
-- opts: width (columns of the whole chart), height (rows of the plot area), title,
-- log_y, xlabel.
function M.text_chart(curves, opts)
  local width, height = opts.width or 80, opts.height or 20
  local xmin, xmax, ymin, ymax = math.huge, -math.huge, math.huge, -math.huge
  local function ty(y)
    if opts.log_y then return y > 0 and math.log(y, 10) or nil end
    return y
  end
  for _, c in ipairs(curves) do
    for _, p in ipairs(c.points) do
      local y = ty(p[2])
      if y then
        xmin, xmax = math.min(xmin, p[1]), math.max(xmax, p[1])
        ymin, ymax = math.min(ymin, y), math.max(ymax, y)
      end
    end
  end
  if xmin > xmax then failed("--log-y: no positive value to draw") end
  if xmax == xmin then xmin, xmax = xmin - 1, xmax + 1 end
  if ymax == ymin then ymin, ymax = ymin - 1, ymax + 1 end
  local function label_y(v) return short(opts.log_y and 10 ^ v or v) end
  local lw = math.max(#label_y(ymin), #label_y(ymax), #label_y((ymin + ymax) / 2))
  local cols = math.max(10, width - lw - 2)
  local grid = {}
  for r = 1, height do
    grid[r] = {}
    for col = 1, cols do grid[r][col] = " " end
  end
  local function cell(x, y)
    local col = math.floor((x - xmin) / (xmax - xmin) * (cols - 1) + 0.5) + 1
    local row = height - math.floor((y - ymin) / (ymax - ymin) * (height - 1) + 0.5)
    return col, row
  end
  for i, c in ipairs(curves) do
    local mark = MARKS[(i - 1) % #MARKS + 1]
    local pc, pr
    for _, p in ipairs(c.points) do
      local y = ty(p[2])
      if y then
        local col, row = cell(p[1], y)
        if pc and math.abs(col - pc) + math.abs(row - pr) > 1 then -- join to the previous point
          local n = math.max(math.abs(col - pc), math.abs(row - pr))
          for k = 1, n - 1 do
            local cc = pc + math.floor((col - pc) * k / n + 0.5)
            local rr = pr + math.floor((row - pr) * k / n + 0.5)
            if grid[rr][cc] == " " then grid[rr][cc] = "." end
          end
        end
        grid[row][col] = mark
        pc, pr = col, row
      end
    end
  end
  local out = {}
  if opts.title then out[#out + 1] = opts.title end
  for r = 1, height do
    local lab = ""
    if r == 1 then lab = label_y(ymax)
    elseif r == height then lab = label_y(ymin)
    elseif r == (height + 1) // 2 then lab = label_y(ymax - (ymax - ymin) * (r - 1) / (height - 1)) end
    out[#out + 1] = (string.format("%" .. lw .. "s |%s", lab, table.concat(grid[r])):gsub("%s+$", ""))
  end
  out[#out + 1] = string.rep(" ", lw) .. " +" .. string.rep("-", cols)
  local shown = 0
  if opts.marks and #opts.marks > 0 then -- faults under the axis: ! where one began, ^ where one ended
    local row = {}
    for col = 1, cols do row[col] = " " end
    for _, mk in ipairs(opts.marks) do
      if mk[1] >= xmin and mk[1] <= xmax then
        local col = cell(mk[1], ymin)
        row[col] = (mk.back and row[col] ~= "!") and "^" or "!"
        shown = shown + 1
      end
    end
    if shown > 0 then out[#out + 1] = (string.rep(" ", lw + 2) .. table.concat(row)):gsub("%s+$", "") end
  end
  local left, right = short(xmin), short(xmax)
  local mid = short((xmin + xmax) / 2)
  local axis = left .. string.rep(" ", math.max(1, cols // 2 - #left - #mid // 2)) .. mid
  axis = axis .. string.rep(" ", math.max(1, cols - #axis - #right)) .. right
  out[#out + 1] = string.rep(" ", lw + 2) .. axis
  out[#out + 1] = string.rep(" ", lw + 2) .. (opts.xlabel or "")
    .. (opts.log_y and "   (y logarithmic)" or "")
  for i, c in ipairs(curves) do
    out[#out + 1] = string.format("  %s %s (%d point%s)", MARKS[(i - 1) % #MARKS + 1], c.label, #c.points,
      #c.points == 1 and "" or "s")
  end
  if #curves > #MARKS then out[#out + 1] = "  (marks repeat after " .. #MARKS .. " curves)" end
  if shown > 0 then
    local begun, back = 0, 0
    for _, mk in ipairs(opts.marks) do
      if mk[1] >= xmin and mk[1] <= xmax then
        if mk.back then back = back + 1 else begun = begun + 1 end
      end
    end
    out[#out + 1] = string.format("  ! a fault (%d), ^ one over (%d): under the axis", begun, back)
  end
  return table.concat(out, "\n")
end

-- ---- gnuplot ----

-- The path of gnuplot on PATH, or nil.
function M.find_gnuplot()
  local p = io.popen("command -v gnuplot 2>/dev/null", "r")
  local where = p and p:read("l")
  if p then p:close() end
  if where and where ~= "" then return where end
  return nil
end

local function gp_string(s) return "'" .. tostring(s):gsub("'", "''") .. "'" end

-- Draws curves into opts.out (PNG) with gnuplot: opts.width, opts.height (pixels),
-- title, xlabel, ylabel, log_y.  Returns true, or nil and gnuplot's message.
-- pngcairo draws smoother lines; the plain png terminal (libgd) is the fallback
local function png_terminal()
  local probe = io.popen("gnuplot -e 'set terminal pngcairo' 2>&1", "r")
  local said = probe:read("a")
  probe:close()
  return said:find("unknown", 1, true) and "png" or "pngcairo"
end

-- Runs gnuplot on script, then removes its data file; true once out is written, else
-- nil and what gnuplot said.
local function run_gnuplot(script, data, out)
  local errfile = os.tmpname()
  local p = io.popen("gnuplot 2>" .. errfile, "w")
  p:write(script, "\n")
  local ok = p:close()
  local ef = io.open(errfile, "r")
  local msg = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(errfile)
  os.remove(data)
  local f = io.open(out, "rb")
  local size = f and f:seek("end") or 0
  if f then f:close() end
  if not ok or size == 0 then return nil, (msg:gsub("%s+$", ""):gsub("^%s+", "")) end
  return true
end

-- The faults as vertical lines across the chart, each named at its top: red dashed where
-- one began, green dotted where one ended (at most 60 named).
local function fault_lines(marks)
  local lines = {}
  for i, mk in ipairs(marks or {}) do
    lines[#lines + 1] = string.format("set arrow from %.17g, graph 0 to %.17g, graph 1 nohead dt %d lw 1 lc rgb '%s'",
      mk[1], mk[1], mk.back and 3 or 2, mk.back and "forest-green" or "red")
    if i <= 60 then
      lines[#lines + 1] = string.format("set label %s at %.17g, graph 0.99 rotate by 90 right font ',8' tc rgb '%s'",
        gp_string(mk.text), mk[1], mk.back and "forest-green" or "red")
    end
  end
  return table.concat(lines, "\n")
end

function M.gnuplot(curves, opts)
  local data = os.tmpname()
  local f = assert(io.open(data, "w"))
  for _, c in ipairs(curves) do
    f:write("# ", c.label, "\n")
    for _, p in ipairs(c.points) do f:write(string.format("%.17g %.17g\n", p[1], p[2])) end
    f:write("\n\n")
  end
  f:close()
  local terminal = png_terminal()
  local plots = {}
  for i, c in ipairs(curves) do
    local style = #c.points <= 40 and "linespoints pointsize 0.7" or "lines"
    plots[#plots + 1] = string.format("%s index %d using 1:2 with %s linewidth 1.5 title %s", gp_string(data), i - 1,
      style, gp_string(c.label))
  end
  local script = table.concat({
    string.format("set terminal %s noenhanced size %d,%d", terminal, opts.width, opts.height),
    "set output " .. gp_string(opts.out),
    "set title " .. gp_string(opts.title or ""),
    "set xlabel " .. gp_string(opts.xlabel or ""),
    "set ylabel " .. gp_string(opts.ylabel or ""),
    opts.log_y and "set logscale y" or "unset logscale y",
    #curves > 3 and "set key below" or "set key top right", "set grid", -- many curves: the key off the data
    "set offsets graph 0, 0, 0.05, 0.05", -- points on the largest or smallest y stay off the frame
    fault_lines(opts.marks),
    "plot " .. table.concat(plots, ", "),
  }, "\n")
  return run_gnuplot(script, data, opts.out)
end

-- ---- --kind compute: where each island's time went ----

-- The account of each run's summary (docs/sim.md, docs/runtime.md): rows of { label,
-- shares } per island, and the buckets to show; each run's total is its summary's
-- (weighted by the islands' rates, core/account.h).  A run without one is an error naming it.
function M.compute_rows(runs)
  local account = require "diloco.account"
  local rows, all = {}, {}
  for _, run in ipairs(runs) do
    local summary
    for i = #run.records, 1, -1 do
      if run.records[i].event == "summary" then
        summary = run.records[i]
        break
      end
    end
    local per = summary and type(summary.per_learner) == "table" and summary.per_learner
    if not per or #per == 0 or type(per[1].account) ~= "table" then
      bad_input("%s: no account in its summary (expected the summary of a run of several islands by sim or run of "
        .. "this version: per_learner[m].account; a run still going has no summary)", run.path)
    end
    run.account_total = type(summary.account) == "table" and summary.account or nil
    for m, l in ipairs(per) do
      local a = type(l.account) == "table" and l.account or {}
      all[#all + 1] = a
      rows[#rows + 1] = { label = #runs > 1 and string.format("%s %d", run.label, m) or string.format("island %d", m),
        shares = a, run = run, learner = m, merged = l.merged }
    end
  end
  return rows, account.shown(all)
end

-- The rows as a stacked-bar PNG: one bar per island, one colour per bucket, in percent.
function M.gnuplot_compute(rows, buckets, opts)
  local data = os.tmpname()
  local f = assert(io.open(data, "w"))
  for _, r in ipairs(rows) do
    f:write('"', (r.label:gsub('"', "'")), '"')
    for _, b in ipairs(buckets) do f:write(string.format(" %.6f", 100 * (tonumber(r.shares[b]) or 0))) end
    f:write("\n")
  end
  f:close()
  local terminal = png_terminal()
  local longest = 0 -- labels that would run into each other are slanted
  for _, r in ipairs(rows) do longest = math.max(longest, #r.label) end
  local crowded = longest * #rows * 8 > 0.6 * opts.width
  local cols = {}
  for i, b in ipairs(buckets) do
    cols[#cols + 1] = string.format("%s using %d%s title %s", i == 1 and gp_string(data) or "''", i + 1,
      i == 1 and ":xtic(1)" or "", gp_string(b == "done" and "done early" or b))
  end
  local script = table.concat({
    string.format("set terminal %s noenhanced size %d,%d", terminal, opts.width, opts.height),
    "set output " .. gp_string(opts.out),
    "set title " .. gp_string(opts.title or ""),
    "set ylabel 'share of the time (%)'",
    "set yrange [0:100]", "set style data histograms", "set style histogram rowstacked",
    "set style fill solid 0.85 border -1", "set boxwidth 0.7", "set key outside right", "set grid ytics",
    crowded and "set xtics rotate by -30 offset -1,0" or "", crowded and "set bmargin 6" or "",
    "plot " .. table.concat(cols, ", "),
  }, "\n")
  return run_gnuplot(script, data, opts.out)
end

-- --kind compute: the table on stdout, or the stacked bars in opts.out.
local function main_compute(runs, opts, pw, ph, title)
  local account = require "diloco.account"
  local rows, buckets = M.compute_rows(runs)
  local function tables()
    local parts = {}
    for _, run in ipairs(runs) do
      local per, merged = {}, {}
      for _, r in ipairs(rows) do
        if r.run == run then per[#per + 1], merged[#merged + 1] = r.shares, r.merged end
      end
      parts[#parts + 1] = (#runs > 1 and run.label .. ":\n" or "") .. account.table_text(per, run.account_total,
        merged, buckets)
    end
    return table.concat(parts, "\n\n")
  end
  if not opts.out then
    io.stdout:write(tables(), "\n")
    return 0
  end
  if not M.find_gnuplot() then
    io.stdout:write(tables(), "\n")
    failed("--out %s: gnuplot not found on PATH (scripts/setup installs the Debian package gnuplot-nox), so the "
      .. "table is printed above and %s was not written", opts.out, opts.out)
  end
  local ok, gerr = M.gnuplot_compute(rows, buckets, { out = opts.out, width = pw, height = ph,
    title = "where each island's time went: " .. title })
  if not ok then failed("--out %s: gnuplot failed: %s", opts.out, gerr ~= "" and gerr or "no output written") end
  print(string.format("wrote %s: %d island%s", opts.out, #rows, #rows == 1 and "" or "s"))
  return 0
end

-- ---- the command ----

local X_LABELS = { step = "step", tokens = "tokens", virtual_s = "virtual seconds", time = "wall seconds" }

-- parse: diloco.cli's option parser, args -> opts (defaults filled in), positional.
function M.main(args, parse)
  local opts, pos = parse(args)
  if #pos == 0 then usage("missing RUN_OR_METRICS (a run directory or a metrics.jsonl)") end
  local spec = M.parse_spec(opts.y, opts.events)
  local pw, ph = opts.size:match("^(%d+)x(%d+)$")
  pw, ph = tonumber(pw), tonumber(ph)
  if not pw or pw < 100 or ph < 100 or pw > 10000 or ph > 10000 then
    usage("--size %s: expected WIDTHxHEIGHT in pixels, each in [100, 10000] (900x600)", opts.size)
  end
  if opts.out and not opts.out:match("%.png$") then
    usage("--out %s: expected a .png file name (without --out the chart is printed as text)", opts.out)
  end
  local runs = {}
  for _, a in ipairs(pos) do runs[#runs + 1] = M.read_noting_skips(a, "plot") end
  M.unique_labels(runs)
  local names = {}
  for _, run in ipairs(runs) do names[#names + 1] = run.label end
  local title = opts.title or table.concat(names, ", ")
  if opts.kind == "compute" then
    return main_compute(runs, opts, pw, ph, title)
  elseif opts.kind ~= "curves" then
    usage("--kind %s: expected curves or compute", opts.kind)
  end
  local curves = M.series(runs, spec, opts.x)
  local marks = M.fault_marks(runs, opts.x)
  local xfield = M.X_ALIASES[opts.x] or opts.x
  local ys = {}
  for _, y in ipairs(spec.ys) do ys[#ys + 1] = y.text end
  local xlabel = X_LABELS[xfield] or xfield
  local function text_chart()
    local width = opts.width or (diloco.isatty(1) and diloco.terminal_size(1)) or 80
    return M.text_chart(curves, { width = math.min(width, 1000), height = opts.height, title = title,
      log_y = opts["log-y"], xlabel = xlabel, marks = marks })
  end
  if not opts.out then
    io.stdout:write(text_chart(), "\n")
    return 0
  end
  if not M.find_gnuplot() then
    io.stdout:write(text_chart(), "\n")
    failed("--out %s: gnuplot not found on PATH (scripts/setup installs the Debian package gnuplot-nox), so the "
      .. "chart is printed above as text and %s was not written", opts.out, opts.out)
  end
  local ok, gerr = M.gnuplot(curves, { out = opts.out, width = pw, height = ph, title = title, xlabel = xlabel,
    ylabel = table.concat(ys, ", "), log_y = opts["log-y"], marks = marks })
  if not ok then failed("--out %s: gnuplot failed: %s", opts.out, gerr ~= "" and gerr or "no output written") end
  local points = 0
  for _, c in ipairs(curves) do points = points + #c.points end
  print(string.format("wrote %s: %d curve%s, %d points", opts.out, #curves, #curves == 1 and "" or "s", points))
  return 0
end

return M
