-- diloco.cli: the subcommands of diloco-lua (run, sim, sample, goodput, plot, compare) and every
-- --help text, generated from one option table per command (M.commands, plain data that
-- the docstring registry and the docs reuse).
--
-- main(name, args) returns the process exit status (M.EXIT): 0 ok, 1 the work failed,
-- 2 a usage or recipe error, 128 + N stopped by signal N (after saving; 130 for Ctrl-C);
-- or nil when no command has that name but a file does (main.c then runs the file as a
-- script).  help() prints the top-level --help.
local diloco = require "diloco"
local M = {}

M.EXIT = require("diloco.errors").EXIT

local function err(fmt, ...)
  io.stderr:write("diloco-lua: ", string.format(fmt, ...), "\n")
end

-- A number as the user would write it: integers without ".0" (1e12 -> 1000000000000),
-- other values with the fewest digits that read back the same.
local function num_text(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v == math.floor(v) and math.abs(v) < 2 ^ 63 then return string.format("%d", v) end
  return diloco.metrics.double_text(v)
end
M.num_text = num_text

-- The option tables (lua/diloco/commands.lua): M.commands, by position and by name, and
-- M.toplevel, the interpreter's own options.
local commands = require "diloco.commands"
M.commands, M.toplevel = commands.commands, commands.toplevel

-- ---- help text ----

local WIDTH = 79 -- of every help line

-- items (a list of strings, or the words of a string) joined by spaces into lines of at
-- most width columns where possible: the first line starts with first, the others
-- with indent.
local function wrap(items, width, indent, first)
  if type(items) == "string" then -- words; a `code span` stays on one line
    local words = {}
    for w in items:gsub("`[^`]*`", function(span) return (span:gsub(" ", "\0")) end):gmatch("%S+") do
      words[#words + 1] = w:gsub("%z", " ")
    end
    items = words
  end
  first = first or ""
  local lines, line, empty = {}, first, true
  for _, item in ipairs(items) do
    if not empty and #line + 1 + #item > width then
      lines[#lines + 1] = line
      line, empty = indent .. item, false
    elseif empty then
      line, empty = line .. item, false
    else
      line = line .. " " .. item
    end
  end
  lines[#lines + 1] = line
  return lines
end

local function option_flag(o)
  if o.name:sub(1, 1) == "-" then return o.name .. (o.arg and " " .. o.arg or "") end
  return "--" .. o.name .. (o.arg and " " .. o.arg or "")
end

-- The help's statement of an option's default (nil: none to state).
local function default_text(o)
  if o.shown then return o.shown end
  if o.default == nil then return nil end
  if type(o.default) == "number" then return num_text(o.default) end
  return tostring(o.default)
end
M.default_text = default_text

-- A command's synopsis, "usage: diloco-lua run RECIPE.lua [--set KEY=VALUE]... [--out
-- DIR] ...", as lines; lead replaces "usage: ", indent starts the continuation lines.
local function synopsis(c, lead, indent)
  lead = lead or "usage: "
  local head = lead .. "diloco-lua " .. c.name
  local parts = { head .. (c.args ~= "" and " " .. c.args or "") }
  for _, o in ipairs(c.options) do
    parts[#parts + 1] = "[" .. option_flag(o) .. "]" .. (o.list and "..." or "")
  end
  return wrap(parts, WIDTH, indent or string.rep(" ", #head + 1))
end
M.synopsis = function(c) return table.concat(synopsis(c), "\n") end

local function option_lines(options, out)
  for _, o in ipairs(options) do
    local flag = option_flag(o)
    local doc = o.doc
    local d = default_text(o)
    if o.list then doc = doc:gsub("; repeatable$", "") .. " (repeatable)" end -- said once
    if d then doc = doc .. " (default: " .. d .. ")" end
    if o.type and o.min then
      doc = doc .. string.format(" [%s in %s..%s]", o.type == "integer" and "integer" or "number", num_text(o.min),
        num_text(o.max))
    end
    local first = string.format("  %-22s ", flag)
    if #flag > 22 then
      out[#out + 1] = "  " .. flag
      first = string.rep(" ", 25)
    end
    for _, l in ipairs(wrap(doc, WIDTH, string.rep(" ", 25), first)) do out[#out + 1] = l end
  end
end

-- The --help text of one command.
function M.command_help(name)
  local c = assert(M.commands[name], name)
  local out = synopsis(c)
  for _, p in ipairs(c.about or {}) do
    for _, l in ipairs(wrap(p, WIDTH, "")) do out[#out + 1] = l end
  end
  out[#out + 1] = "Options (a flag is off unless given):"
  option_lines(c.options, out)
  if c.exit then
    for _, l in ipairs(wrap("Exit status: " .. c.exit .. ".", WIDTH, "")) do out[#out + 1] = l end
  end
  return table.concat(out, "\n")
end

-- The top-level --help text: the interpreter's options, then every command's synopsis.
function M.help_text()
  local t = M.toplevel
  local out = { "usage: " .. t.usage[1] }
  for i = 2, #t.usage do out[#out + 1] = "       " .. t.usage[i] end
  out[#out + 1] = "Options:"
  option_lines(t.options, out)
  for _, l in ipairs(wrap(t.about, WIDTH, "")) do out[#out + 1] = l end
  out[#out + 1] = "Commands (diloco-lua COMMAND --help: each option's default and meaning):"
  for _, c in ipairs(M.commands) do
    out[#out + 1] = string.format("  %-8s %s%s", c.name, c.summary, c.available == false and " (not available yet)" or "")
    if c.available ~= false then
      for _, l in ipairs(synopsis(c, "    ", "        ")) do out[#out + 1] = l end
    end
  end
  for _, l in ipairs(wrap("Exit status: " .. t.exit .. ".", WIDTH, "")) do out[#out + 1] = l end
  return table.concat(out, "\n")
end

function M.help()
  io.stdout:write(M.help_text(), "\n")
end

-- ---- parsing ----

local function usage_error(fmt, ...)
  error({ usage = string.format(fmt, ...) }, 0)
end

-- Not lua-argparse (Debian's lua-argparse was considered): its messages, its help layout
-- and its exit on error (os.exit from inside the parser) differ from the messages and
-- statuses the specs pin, and the option tables here are needed as plain data anyway.
--
-- Parses "--name value" / "--name=value" options against a command's option table:
-- flags are true when given; list options collect their values; typed options are
-- converted and checked (message with the value as written and the range as integers
-- when the type is); absent options get their default.  Returns opts, positional list;
-- raises {usage = msg} on error.
function M.parse(args, c)
  local by = {}
  for _, o in ipairs(c.options) do by[o.name] = o end
  local opts, pos, i = {}, {}, 1
  while i <= #args do
    local a = args[i]
    local name, inline = a:match("^%-%-([%w%-]+)=(.*)$")
    name = name or a:match("^%-%-([%w%-]+)$")
    if name then
      local o = by[name]
      if not o then usage_error("unknown option '--%s'", name) end
      if not o.arg then
        if inline then usage_error("option '--%s' takes no value (got '%s')", name, a) end
        opts[name] = true
      else
        local v = inline
        if not v then
          i = i + 1
          v = args[i]
        end
        if v == nil then usage_error("option '--%s' needs a value (%s)", name, o.arg) end
        if o.type then
          local n = tonumber(v)
          local bad = not n or n ~= n or (o.type == "integer" and n ~= math.floor(n)) or (o.min and n < o.min)
            or (o.max and n > o.max)
          if bad then
            usage_error("--%s %s: expected %s in [%s, %s]", name, v, o.type == "integer" and "an integer" or "a number",
              num_text(o.min), num_text(o.max))
          end
          v = o.type == "integer" and math.tointeger(n) or n
        end
        if o.list then
          opts[name] = opts[name] or {}
          table.insert(opts[name], v)
        else
          opts[name] = v
        end
      end
    elseif a:match("^%-") and a ~= "-" then
      usage_error("unknown option '%s'", a)
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  for _, o in ipairs(c.options) do
    if opts[o.name] == nil and o.default ~= nil then opts[o.name] = o.default end
  end
  return opts, pos
end

-- ---- run and sim ----

-- The recipe of a run/sim command line, validated; or nil and the exit status after
-- reporting the problems.
local function load_recipe(pos, opts)
  if #pos ~= 1 then usage_error(#pos == 0 and "missing RECIPE" or "expected one RECIPE, got " .. #pos) end
  local r, lerr = diloco.recipe.load(pos[1])
  if not r then
    err("%s", lerr)
    return nil, M.EXIT.usage
  end
  for _, s in ipairs(opts.set or {}) do
    local ok, e = pcall(diloco.recipe.set, r, s)
    if not ok then
      err("%s", tostring(e))
      return nil, M.EXIT.usage
    end
  end
  local valid, problems = diloco.recipe.validate(r)
  if not valid then
    err("%s: %d problem%s in the recipe:", pos[1], #problems, #problems == 1 and "" or "s")
    for _, p in ipairs(problems) do io.stderr:write("  ", p, "\n") end
    return nil, M.EXIT.usage
  end
  return r
end

-- The summary as a JSON line on stdout (--quiet).  A write that fails (a full disk, a
-- closed pipe) is an error that says where the summary still is: the run is saved.
local function print_summary(summary)
  local okw, werr = io.stdout:write(diloco.metrics.line("summary", summary, diloco.wall_time()), "\n")
  local okf, ferr = true, nil
  if okw then okf, ferr = io.stdout:flush() end
  if okw and okf then return true end
  return nil, string.format("writing the summary to stdout: %s (the run is saved; its summary is the last line of "
    .. "%s)", tostring(werr or ferr):gsub("^[^:]*: ", ""), summary.out and summary.out .. "/metrics.jsonl" or
    "its metrics")
end

-- Runs fn(r, run_opts) (diloco.train.run or diloco.sim.run): with --quiet the summary is
-- printed as JSON, also after a failure (the run saved what it could); returns the exit
-- status (128 + N after signal N) or raises the run's error (a failed write of the
-- summary too: exit 1).
local function train(fn, r, opts, run_opts)
  local ok, summary, interrupted, signo = pcall(fn, r, run_opts)
  if not ok then
    local e = summary
    if type(e) == "table" and e.summary and opts.quiet then print_summary(e.summary) end
    error(e, 0)
  end
  if opts.quiet and not (summary and summary.silent) then -- (silent: an island's rank > 0)
    local okp, perr = print_summary(summary)
    if not okp then error({ diloco_error = perr, code = M.EXIT.failed }, 0) end
  end
  return interrupted and M.EXIT.signal_base + (signo or 2) or M.EXIT.ok
end

-- The options and recipe of a run/sim command line: opts, pos, r; or nil and the exit
-- status when there is nothing to train (--fields, or a recipe that failed).
local function recipe_command(args, parse)
  local opts, pos = parse(args)
  if opts.fields then
    for _, line in ipairs(diloco.recipe.describe_schema()) do print(line) end
    return nil, M.EXIT.ok
  end
  local r, code = load_recipe(pos, opts)
  if not r then return nil, code end
  return opts, pos, r
end

local function run(args, parse)
  local opts, pos, r = recipe_command(args, parse)
  if not opts then return pos end
  -- real islands: learner processes (or mpirun jobs, an island of several ranks) and the syncer here
  if r.islands.count > 1 or r.islands.list[1].ranks then
    -- resumed: the syncer from its newest checkpoint (OUT/syncer), each learner from its own
    if opts.resume and opts.resume ~= "latest" then
      usage_error("--resume %s: a run of several islands resumes its syncer from its newest checkpoint and each "
        .. "learner from its own: --resume latest", opts.resume)
    end
    return train(require("diloco.cluster").run, r, opts, { metrics = opts.metrics, out = opts.out,
      overwrite = opts.overwrite, quiet = opts.quiet, recipe_path = pos[1], set = opts.set, resume = opts.resume,
      command = "diloco-lua run " .. table.concat(args, " ") })
  end
  local refused = diloco.recipe.single_island_problems(r) -- faults on one island: `sim`
  if #refused > 0 then
    for _, p in ipairs(refused) do err("%s: %s", pos[1], p) end
    return M.EXIT.usage
  end
  return train(diloco.train.run, r, opts, { metrics = opts.metrics, out = opts.out, resume = opts.resume,
    overwrite = opts.overwrite, quiet = opts.quiet, command = "diloco-lua run " .. table.concat(args, " ") })
end

local function replay(opts, pos)
  if #pos > 1 then usage_error("--replay OUT takes at most one RECIPE (the run's, when it moved), got " .. #pos) end
  for _, k in ipairs { "out", "overwrite", "metrics", "resume" } do
    if opts[k] then usage_error("--replay OUT: --" .. k .. " does not apply (a replay writes nothing)") end
  end
  local summary = require("diloco.replay").run(opts.replay, { quiet = opts.quiet, recipe = pos[1], set = opts.set })
  if opts.quiet then
    local okp, perr = print_summary(summary)
    if not okp then error({ diloco_error = perr, code = M.EXIT.failed }, 0) end
  end
  return M.EXIT.ok
end

local function sim(args, parse)
  do
    local o, p = parse(args)
    if o.replay then return replay(o, p) end
  end
  local opts, pos, r = recipe_command(args, parse)
  if not opts then return pos end
  return train(diloco.sim.run, r, opts, { metrics = opts.metrics, out = opts.out, overwrite = opts.overwrite,
    quiet = opts.quiet, resume = opts.resume, command = "diloco-lua sim " .. table.concat(args, " ") })
end

local function secret_opts(opts)
  local env = os.getenv("DILOCO_SECRET")
  return opts["secret-file"], (not opts["secret-file"] and env and env ~= "") and env or nil
end

-- The net's tls option of a syncer or learner command line (nil: plain TCP).
local function tls_opts(opts, who)
  if who == "syncer" then
    if (opts["tls-cert"] == nil) ~= (opts["tls-key"] == nil) then
      usage_error("--tls-cert and --tls-key go together (the server's certificate and its key)")
    end
    return opts["tls-cert"] and { cert = opts["tls-cert"], key = opts["tls-key"] } or nil
  end
  return opts["tls-ca"] and { ca = opts["tls-ca"] } or nil
end

-- --shard I/S: shard, shards (1, 1 without it); OUT becomes OUT/shard-I.
local function shard_opts(opts, r)
  if not opts.shard then return 1, 1, opts.out end
  local i, s = opts.shard:match("^(%d+)/(%d+)$")
  i, s = math.tointeger(tonumber(i or "")), math.tointeger(tonumber(s or ""))
  local P = r.sync.fragments or 1
  if not i or not s or s < 1 or i < 1 or i > s or s > 16 then
    usage_error(string.format("--shard %s: expected I/S with 1 <= I <= S <= 16 (shard I of S)", opts.shard))
  end
  if s > 1 and (r.sync.preset == "dp" or s > P) then
    usage_error(string.format("--shard %s: %s; a shard owns one fragment at least", opts.shard,
      r.sync.preset == "dp" and "data parallel has one syncer (one fragment)"
        or string.format("the recipe has sync.fragments = %d, fewer than %d shards", P, s)))
  end
  if (r.islands.syncers or 1) ~= s and r.islands.syncers then
    usage_error(string.format("--shard %s: the recipe has islands.syncers = %d shards", opts.shard, r.islands.syncers))
  end
  local file, secret = secret_opts(opts)
  if s > 1 and not file and not secret then
    usage_error("--shard: the shards share the run's secret: give --secret-file FILE or set DILOCO_SECRET")
  end
  if s == 1 then return 1, 1, opts.out end -- (one shard of one: the syncer)
  return i, s, string.format("%s/shard-%d", opts.out or r.out or ("runs/" .. (r.name or "run")), i)
end

local function syncer(args, parse)
  local opts, pos, r = recipe_command(args, parse)
  if not opts then return pos end
  local file, secret = secret_opts(opts)
  local shard, shards, out = shard_opts(opts, r)
  local standby_of
  if opts["standby-of"] then -- (docs/shards.md, "Standbys"): OUT-standby beside the primary's OUT
    if r.sync.preset == "dp" then usage_error("--standby-of: data parallel has no standby (its rounds are not replicated)") end
    standby_of = require("diloco.learner").resolve_connect(opts["standby-of"], require("diloco.cluster").runtime(r).join_timeout)
    -- OUT-standby, or OUT-standby2, 3, ... when that one holds a run already (a primary
    -- replaced, started again as the standby of the one that took its place)
    local base = (out or r.out or ("runs/" .. (r.name or "run"))) .. "-standby"
    out = base
    for n = 2, 16 do
      local f = io.open(out .. "/metrics.jsonl", "r")
      if not f or opts.overwrite or opts.resume then
        if f then f:close() end
        break
      end
      f:close()
      out = base .. n
    end
  elseif opts.lease then
    usage_error("--lease: only a standby (--standby-of) has a lease")
  end
  return train(require("diloco.cluster").serve, r, opts, { metrics = opts.metrics, out = out, shard = shard,
    shards = shards, standby_of = standby_of, lease = opts.lease,
    overwrite = opts.overwrite, quiet = opts.quiet, listen = opts.listen, advertise = opts.advertise,
    address_file = opts["address-file"], secret_file = file, secret = secret, run_id = opts["run-id"] or r.name,
    resume = opts.resume, tls = tls_opts(opts, "syncer"), recipe_path = pos[1], set = opts.set,
    command = "diloco-lua syncer " .. table.concat(args, " ") })
end

local function learner(args, parse)
  local opts, pos, r = recipe_command(args, parse)
  if not opts then return pos end
  if not opts.connect then usage_error("--connect HOST:PORT (or @FILE) is required") end
  local file, secret = secret_opts(opts)
  if not file and not secret then
    usage_error("no secret: give --secret-file FILE or set DILOCO_SECRET (the syncer's)")
  end
  local parent = math.tointeger(tonumber(os.getenv("DILOCO_SUPERVISOR") or ""))
  if parent then diloco.proc.die_with_parent("TERM", parent) end -- a supervisor killed by -9 takes its learners along
  return train(require("diloco.learner").run, r, opts, { connect = opts.connect, id = opts.id,
    rank_offset = opts["rank-offset"], out = opts.out, metrics = opts.metrics, quiet = opts.quiet,
    overwrite = opts.overwrite, tls = tls_opts(opts, "learner"), restart_at = opts["restart-at"],
    secret_file = file, secret = secret, run_id = opts["run-id"],
    command = "diloco-lua learner " .. table.concat(args, " ") })
end

-- main(args, parse) of each available command; parse(args) -> opts, positional.
local handlers = {
  run = run,
  sim = sim,
  syncer = syncer,
  learner = learner,
  sample = function(args, parse) return require("diloco.sample").main(args, parse) end,
  goodput = function(args, parse) return require("diloco.goodput").main(args, parse) end,
  plot = function(args, parse) return require("diloco.plot").main(args, parse) end,
  compare = function(args, parse) return require("diloco.compare").main(args, parse) end,
}

-- "--debug" anywhere among the options (not as the value of a value option): removed
-- from args, and returned as true.
local function take_debug(args, c)
  local takes_value = {}
  for _, o in ipairs(c.options) do takes_value[o.name] = o.arg ~= nil end
  local rest, debug, i = {}, false, 1
  while i <= #args do
    local a = args[i]
    if a == "--debug" then
      debug = true
    else
      rest[#rest + 1] = a
      local name = a:match("^%-%-([%w%-]+)$")
      if name and takes_value[name] and args[i + 1] ~= nil then
        i = i + 1
        rest[#rest + 1] = args[i]
      end
    end
    i = i + 1
  end
  return rest, debug
end

-- "--help" among the options (not as an option's value).
local function wants_help(args, c)
  local takes_value = {}
  for _, o in ipairs(c.options) do takes_value[o.name] = o.arg ~= nil end
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--help" then return true end
    local name = a:match("^%-%-([%w%-]+)$")
    if name and takes_value[name] then i = i + 1 end
    i = i + 1
  end
  return false
end

-- An error message without the "file.lua:12: " positions of our own code.
local function strip_positions(msg)
  return (tostring(msg):gsub("[%w_%./%-]*%.lua:%d+: ", ""))
end

local function available_names()
  local names, later = {}, {}
  for _, c in ipairs(M.commands) do
    if c.available == false then later[#later + 1] = c.name else names[#names + 1] = c.name end
  end
  return names, later
end

-- Errors: {usage = msg} -> exit 2 with the synopsis; {diloco_error = msg[, code = n]} ->
-- exit code (default 1); anything else is an internal error: its message without
-- positions and exit 1, or with --debug the message and the Lua traceback.
function M.main(name, args)
  local c = M.commands[name]
  if not c then
    local f = io.open(name, "r")
    if f then -- a script named like a command word: main.c runs it
      f:close()
      return nil
    end
    local names, later = available_names()
    err("unknown command '%s' (and no file of that name to run as a script); the commands are %s%s; "
      .. "diloco-lua --help lists them", name, table.concat(names, ", "),
      #later > 0 and string.format(" (%s: not available yet)", table.concat(later, ", ")) or "")
    return M.EXIT.usage
  end
  if c.available == false then
    err("'%s' is not available in this version yet (planned: %s)", name, c.summary)
    return M.EXIT.usage
  end
  if wants_help(args, c) then
    io.stdout:write(M.command_help(name), "\n")
    return M.EXIT.ok
  end
  local rest, trace = take_debug(args, c)
  local parse = function(a) return M.parse(a, c) end
  local ok, res = xpcall(handlers[name], function(e)
    if not trace then return e end
    if type(e) == "table" then
      e.traceback = e.hook_traceback or debug.traceback("", 2) -- a recipe hook's own, where it failed
      return e
    end
    return debug.traceback(tostring(e), 2)
  end, rest, parse)
  if ok then return res end
  if type(res) == "table" and res.usage then
    err("%s: %s", name, res.usage)
    io.stderr:write(M.synopsis(c), "\n(diloco-lua ", name, " --help: each option's default and meaning)\n")
    return M.EXIT.usage
  end
  if type(res) == "table" and res.diloco_error then
    err("%s", res.diloco_error)
    if res.traceback then io.stderr:write(res.traceback, "\n") end
    return math.tointeger(res.code) or M.EXIT.failed
  end
  if trace then
    err("%s: internal error: %s", name, tostring(res))
  else
    err("%s: internal error: %s (run again with --debug for a traceback)", name, strip_positions(res))
  end
  return M.EXIT.failed
end

return M
