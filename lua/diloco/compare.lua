-- diloco.compare: the `diloco-lua compare RUN...` command, finished runs side by side.
--
--   diloco-lua compare runs/decoupled runs/diloco runs/charlm
--   diloco-lua compare runs/a runs/b --markdown --plot eval.png --x time
--
-- One row per run (a run directory of run or sim, or a metrics file): the numbers of the
-- summary that ends its metrics (docs/cli.md, "Metrics"; docs/sim.md, "What the metrics
-- say"), "-" for a field the summary does not have, and a status that says when the run
-- failed, was interrupted or has no summary.  With --plot, each run's eval loss curve is
-- drawn into a PNG, overlaid, by the machinery of `diloco-lua plot` (diloco.plot).
--
-- The pieces are usable on their own: M.row(run) -> the numbers of one run (run: a
-- diloco.plot.read result), M.cells(row) -> its texts, M.table_text(rows, opts) -> the
-- table, M.curves(runs, x) -> the eval-loss curves and the runs without any.  main(args,
-- parse) returns the exit status; errors are raised as {usage = msg} or {diloco_error =
-- msg, code = n}, which diloco.cli reports.
local diloco = require "diloco"
local plot = require "diloco.plot"
local M = {}

local function usage(fmt, ...) error({ usage = string.format(fmt, ...) }, 0) end
local function bad_input(fmt, ...) error({ diloco_error = string.format(fmt, ...), code = 2 }, 0) end
local function failed(fmt, ...) error({ diloco_error = string.format(fmt, ...), code = 1 }, 0) end

-- The --x axes of --plot, in the order the help and messages name them.
M.AXES = { "tokens", "time", "wall", "step" }
local AXIS = {}
for _, a in ipairs(M.AXES) do AXIS[a] = true end

-- "tokens, time, wall or step" (or the given list so joined).
function M.axes_text(list)
  list = list or M.AXES
  if #list == 1 then return list[1] end
  return table.concat(list, ", ", 1, #list - 1) .. " or " .. list[#list]
end

-- The table's columns: key of the row, heading, whether the cells are numbers (aligned
-- right in text, `---:` in Markdown).
M.COLUMNS = {
  { key = "run", head = "run" },
  { key = "preset", head = "preset" },
  { key = "learners", head = "learners", number = true },
  { key = "final_eval_loss", head = "eval loss", number = true },
  { key = "goodput", head = "goodput", number = true },
  { key = "uptime", head = "uptime", number = true },
  { key = "idle", head = "idle", number = true },
  { key = "merges", head = "merges", number = true },
  { key = "mb_up", head = "MB up", number = true },
  { key = "mb_down", head = "MB down", number = true },
  { key = "tokens", head = "tokens", number = true },
  { key = "time", head = "time" },
  { key = "status", head = "status" },
}

local SIGNALS = { [1] = "SIGHUP", [2] = "SIGINT", [15] = "SIGTERM" }

-- A finite number, or nil (JSON null, strings, NaN).
local function finite(v)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then return nil end
  return v
end

-- The mean of a summary's idle: a list with one share per learner (null entries, a
-- learner that never ran, do not count) or one number.
local function mean_idle(v)
  if finite(v) then return v end
  if type(v) ~= "table" then return nil end
  local sum, n = 0, 0
  for _, x in ipairs(v) do
    if finite(x) then sum, n = sum + x, n + 1 end
  end
  return n > 0 and sum / n or nil
end

-- Whether a run ran on the virtual clock (sim): its summary or one of its records has
-- a virtual_s.
local function is_sim(run, summary)
  if summary then return finite(summary.virtual_s) ~= nil end
  for _, rec in ipairs(run.records) do
    if finite(rec.virtual_s) then return true end
  end
  return false
end

-- The summary of a run: its own last record when that is a summary (a run that was
-- resumed after its summary and did not finish again has records after it: no summary;
-- a real run's learners' records, read after its own, do not count).
local function last_own(run) return run.records[run.own or #run.records] end -- (own: plot.read's count)
local function summary_of(run)
  local last = last_own(run)
  if last and last.event == "summary" then return last end
  return nil
end

-- The numbers of one run (run: a diloco.plot.read result): run (its label), preset,
-- learners, final_eval_loss, goodput, uptime, idle (mean over learners), merges, mb_up,
-- mb_down (10^6 bytes), tokens (else useful_tokens), time and clock ("virtual" for a
-- sim's virtual_s, "wall" for wall_s), status (text) and notes (what a failed run or one
-- without a summary says, a list).  A field the summary lacks is nil.
function M.row(run)
  local s = summary_of(run)
  local row = { run = run.label, path = run.path, notes = {} }
  if not s then
    local last = last_own(run)
    row.status = "no summary"
    row.notes[1] = string.format("%s: no summary: the last record is %s %s (a run still going, or one killed "
      .. "before it could write its summary)", run.label, last.event:match("^[aeiou]") and "an" or "a", last.event)
    row.clock = is_sim(run, nil) and "virtual" or "wall"
    return row
  end
  row.preset = type(s.preset) == "string" and s.preset or nil
  row.learners = finite(s.learners)
  row.final_eval_loss = finite(s.final_eval_loss)
  row.goodput, row.uptime = finite(s.goodput), finite(s.uptime)
  row.idle = mean_idle(s.idle)
  row.merges = finite(s.merges)
  row.mb_up = finite(s.bytes_up) and s.bytes_up / 1e6
  row.mb_down = finite(s.bytes_down) and s.bytes_down / 1e6
  row.tokens = finite(s.tokens) or finite(s.useful_tokens)
  if is_sim(run, s) then
    row.time, row.clock = finite(s.virtual_s), "virtual"
  else
    row.time, row.clock = finite(s.wall_s), "wall"
  end
  local status = {}
  if type(s.error) == "string" then
    status[#status + 1] = "error"
    row.notes[#row.notes + 1] = run.label .. ": error: " .. s.error
  end
  if type(s.save_error) == "string" then
    status[#status + 1] = "save error"
    row.notes[#row.notes + 1] = run.label .. ": save error: " .. s.save_error
  end
  if s.interrupted == true then
    local sig = math.tointeger(finite(s.signal))
    status[#status + 1] = "interrupted" .. (sig and " (" .. (SIGNALS[sig] or "signal " .. sig) .. ")" or "")
  end
  row.status = #status > 0 and table.concat(status, ", ") or "ok"
  return row
end

local function count_text(v)
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
  return string.format("%.1f", v)
end

local function percent(v) return string.format("%.1f%%", 100 * v) end

-- How each column's number is written.
local FORMAT = {
  learners = count_text,
  final_eval_loss = function(v) return string.format("%.4f", v) end,
  goodput = percent,
  uptime = percent,
  idle = percent,
  merges = count_text,
  mb_up = function(v) return string.format("%.1f", v) end,
  mb_down = function(v) return string.format("%.1f", v) end,
  tokens = count_text,
}

-- The texts of a row, one per M.COLUMNS entry: "-" for a missing number; time as
-- "60.0 s virtual" or "2.2 s wall".
function M.cells(row)
  local out = {}
  for i, c in ipairs(M.COLUMNS) do
    local v = row[c.key]
    if c.key == "time" then
      out[i] = v and string.format("%.1f s %s", v, row.clock) or "-"
    elseif FORMAT[c.key] then
      out[i] = v and FORMAT[c.key](v) or "-"
    else
      out[i] = v and tostring(v) or "-"
    end
  end
  return out
end

M.FOOTNOTE = "eval loss: the final eval; idle: mean over learners; MB: 10^6 bytes; tokens: trained by all "
  .. "learners; time: virtual seconds for sim, wall seconds for run"

-- The table of rows (M.row results): aligned plain text, or with opts.markdown a
-- Markdown table; then the footnote and the rows' notes.
function M.table_text(rows, opts)
  opts = opts or {}
  local cells, heads = {}, {}
  for i, c in ipairs(M.COLUMNS) do heads[i] = c.head end
  for r, row in ipairs(rows) do cells[r] = M.cells(row) end
  local out = {}
  if opts.markdown then
    local function md(list)
      local esc = {}
      for i, t in ipairs(list) do esc[i] = (t:gsub("|", "\\|")) end
      return "| " .. table.concat(esc, " | ") .. " |"
    end
    out[1] = md(heads)
    local rule = {}
    for i, c in ipairs(M.COLUMNS) do rule[i] = c.number and "---:" or "---" end
    out[2] = "|" .. table.concat(rule, "|") .. "|"
    for _, list in ipairs(cells) do out[#out + 1] = md(list) end
    out[#out + 1] = ""
  else
    local width = {}
    for i, h in ipairs(heads) do width[i] = utf8.len(h) end
    for _, list in ipairs(cells) do
      for i, t in ipairs(list) do width[i] = math.max(width[i], utf8.len(t) or #t) end
    end
    local function line(list)
      local parts = {}
      for i, t in ipairs(list) do
        local pad = string.rep(" ", width[i] - (utf8.len(t) or #t))
        parts[i] = M.COLUMNS[i].number and pad .. t or t .. pad
      end
      return (table.concat(parts, "  "):gsub("%s+$", ""))
    end
    out[1] = line(heads)
    for _, list in ipairs(cells) do out[#out + 1] = line(list) end
  end
  out[#out + 1] = "(" .. M.FOOTNOTE .. ")"
  for _, row in ipairs(rows) do
    for _, n in ipairs(row.notes or {}) do out[#out + 1] = n end
  end
  return table.concat(out, "\n")
end

-- The field an axis reads from the eval records of run (diloco.plot.series's --x name).
local function x_of(run, axis)
  if axis == "tokens" then return "tokens" end
  if axis == "step" then return "steps" end
  if axis == "wall" then return "wall_s" end
  return is_sim(run, summary_of(run)) and "virtual" or "wall_s" -- time
end

-- Why a run has no point against axis: the numeric fields its eval records have and
-- the axes that would draw it.
local function why_not(run, axis)
  local seen, names, axes = {}, {}, {}
  for _, rec in ipairs(run.records) do
    if rec.event == "eval" then
      for k, v in pairs(rec) do
        if k ~= "time" and finite(v) and not seen[k] then
          seen[k] = true
          names[#names + 1] = k
        end
      end
    end
  end
  table.sort(names)
  if #names == 0 then return "it has no eval record" end
  for _, a in ipairs(M.AXES) do
    local field = x_of(run, a)
    field = plot.X_ALIASES[field] or field
    if a ~= axis and seen[field] and seen.loss then axes[#axes + 1] = "--x " .. a end
  end
  return "its eval records have " .. table.concat(names, ", ")
    .. (#axes > 0 and "; " .. M.axes_text(axes) .. " draws it" or "")
end

-- The eval-loss curves of runs against axis x (M.AXES): one curve per run, labelled by
-- the run (and with x = "time" and both kinds of run, by its clock), through
-- diloco.plot.series (a resumed run's redone points replaced).  Returns curves, missing
-- (a note per run with no eval loss at a numeric x) and the x axis's label.
function M.curves(runs, x)
  if not AXIS[x] then usage("--x %s: expected %s", x, M.axes_text()) end
  local spec = plot.parse_spec("eval")
  local kinds = {}
  for _, run in ipairs(runs) do kinds[x_of(run, x)] = true end
  local mixed = x == "time" and kinds.virtual and kinds.wall_s
  local curves, missing = {}, {}
  for _, run in ipairs(runs) do
    local xname = x_of(run, x)
    local ok, got = pcall(plot.series, { run }, spec, xname)
    if not ok then
      if type(got) ~= "table" or not got.usage then error(got, 0) end
      missing[#missing + 1] = string.format("%s: no eval record has a loss next to a numeric %s (%s)", run.label,
        plot.X_ALIASES[xname] or xname, why_not(run, x))
    else
      for _, c in ipairs(got) do
        c.label = run.label .. (mixed and (xname == "virtual" and " (virtual s)" or " (wall s)") or "")
        curves[#curves + 1] = c
      end
    end
  end
  local xlabel = ({ tokens = "tokens", wall = "wall seconds", step = "step" })[x]
  if x == "time" then
    xlabel = mixed and "seconds (virtual for sim, wall for run)" or kinds.virtual and "virtual seconds"
      or "wall seconds"
  end
  return curves, missing, xlabel
end

local PNG_SIZE = { 900, 600 } -- as `diloco-lua plot`'s default --size

-- parse: diloco.cli's option parser, args -> opts, positional.
function M.main(args, parse)
  local opts, pos = parse(args)
  if #pos == 0 then usage("missing RUN (a run directory of diloco-lua run or sim, or its metrics.jsonl)") end
  local x = opts.x or "tokens"
  if not AXIS[x] then usage("--x %s: expected %s", x, M.axes_text()) end
  if opts.x and not opts.plot then usage("--x %s: only with --plot FILE.png (the axis of the eval-loss chart)", x) end
  if opts.plot and not opts.plot:match("%.png$") then
    usage("--plot %s: expected a .png file name", opts.plot)
  end
  local runs = {}
  for _, a in ipairs(pos) do
    local arg = a:gsub("(.)/+$", "%1") -- runs/x/ is runs/x (its label too)
    local names = diloco.listdir(arg)
    if names then
      local has = false
      for _, n in ipairs(names) do has = has or n == "metrics.jsonl" end
      if not has then
        bad_input("%s: a directory without metrics.jsonl (expected a run directory of diloco-lua run or sim, or "
          .. "its metrics.jsonl)", a)
      end
    end
    runs[#runs + 1] = plot.read_noting_skips(arg, "compare")
  end
  plot.unique_labels(runs)
  local curves, missing, xlabel
  if opts.plot then
    curves, missing, xlabel = M.curves(runs, x)
    if #curves == 0 then
      bad_input("--plot %s: no run has an eval loss to draw against --x %s: %s", opts.plot, x,
        table.concat(missing, "; "))
    end
  end
  local rows = {}
  for _, run in ipairs(runs) do rows[#rows + 1] = M.row(run) end
  io.stdout:write(M.table_text(rows, { markdown = opts.markdown }), "\n")
  io.stdout:flush()
  if not opts.plot then return 0 end
  for _, m in ipairs(missing) do io.stderr:write("diloco-lua: compare: --plot: ", m, ", so it is not drawn\n") end
  if not plot.find_gnuplot() then
    failed("--plot %s: gnuplot not found on PATH (scripts/setup installs the Debian package gnuplot-nox), so %s "
      .. "was not written; the table above is complete", opts.plot, opts.plot)
  end
  local names, drawn = {}, {}
  for _, c in ipairs(curves) do
    if not drawn[c.run] then names[#names + 1], drawn[c.run] = c.run.label, true end
  end
  local ok, gerr = plot.gnuplot(curves, { out = opts.plot, width = PNG_SIZE[1], height = PNG_SIZE[2],
    title = "eval loss: " .. table.concat(names, ", "), xlabel = xlabel, ylabel = "eval loss" })
  if not ok then failed("--plot %s: gnuplot failed: %s", opts.plot, gerr ~= "" and gerr or "no output written") end
  local points = 0
  for _, c in ipairs(curves) do points = points + #c.points end
  io.stderr:write(string.format("wrote %s: %d curve%s, %d points\n", opts.plot, #curves, #curves == 1 and "" or "s",
    points))
  return 0
end

return M
