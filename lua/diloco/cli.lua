-- diloco.cli: the `diloco-lua run`, `sim`, `sample` and `goodput` subcommands.
-- main(name, args) returns the process exit status: 0 ok, 1 failure, 2 usage or
-- recipe error, 128 + N stopped by signal N (after saving).
local diloco = require "diloco"
local M = {}

local function err(fmt, ...)
  io.stderr:write("diloco-lua: ", string.format(fmt, ...), "\n")
end

local RUN_USAGE = [==[
usage: diloco-lua run RECIPE.lua [--set KEY=VALUE]... [--out DIR] [--resume latest|CHECKPOINT]
                                 [--overwrite] [--metrics FILE.jsonl] [--quiet] [--debug]
  --set KEY=VALUE   override a recipe field, nested with dots (--set inner.lr=1e-3)
  --out DIR         run directory (default: the recipe's out, else runs/NAME): metrics.jsonl,
                    recipe.json, checkpoint-STEP.safetensors, model.safetensors
  --resume latest   continue the run in OUT from its newest checkpoint (or give a
                    checkpoint file); the metrics are appended to
  --overwrite       replace the run already in OUT (without it, an existing run is refused)
  --metrics FILE    write the JSON-lines metrics here instead of OUT/metrics.jsonl
  --quiet           no progress output; print the summary as JSON at the end
  --fields          list every recipe field with its default and meaning
  --debug           on an internal error, print the Lua traceback
run trains one island: a recipe with islands.count > 1 or chaos is refused (exit 2);
train several islands, with faults, on the virtual-time driver: diloco-lua sim RECIPE.
Exit status: 0 done, 1 failed (saved what it could), 2 bad recipe or options,
128 + N stopped by signal N after saving (130 SIGINT, 143 SIGTERM, 129 SIGHUP).]==]

local RUN_OPTIONS = { set = "list", metrics = "value", out = "value", resume = "value",
  quiet = "flag", help = "flag", fields = "flag", debug = "flag", overwrite = "flag" }

-- Parses "--flag value" / "--flag=value" options.  spec: name -> "value" | "flag" |
-- "list".  Returns opts, positional list; raises a usage message on error.
local function parse(args, spec, usage)
  local opts, pos, i = {}, {}, 1
  while i <= #args do
    local a = args[i]
    local name, inline = a:match("^%-%-([%w%-]+)=(.*)$")
    name = name or a:match("^%-%-([%w%-]+)$")
    if name then
      local kind = spec[name]
      if not kind then error({ usage = string.format("unknown option '--%s'", name) }, 0) end
      if kind == "flag" then
        if inline then error({ usage = string.format("option '--%s' takes no value (got '%s')", name, a) }, 0) end
        opts[name] = true
      else
        local v = inline
        if not v then
          i = i + 1
          v = args[i]
        end
        if v == nil then error({ usage = string.format("option '--%s' needs a value", name) }, 0) end
        if kind == "list" then
          opts[name] = opts[name] or {}
          table.insert(opts[name], v)
        else
          opts[name] = v
        end
      end
    elseif a:match("^%-") and a ~= "-" then
      error({ usage = string.format("unknown option '%s'", a) }, 0)
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  return opts, pos
end

-- The recipe of a run/sim command line, validated; or nil and the exit status after
-- reporting the problems.
local function load_recipe(pos, opts)
  if #pos ~= 1 then error({ usage = #pos == 0 and "missing RECIPE" or "expected one RECIPE, got " .. #pos }, 0) end
  local r, lerr = diloco.recipe.load(pos[1])
  if not r then
    err("%s", lerr)
    return nil, 2
  end
  for _, s in ipairs(opts.set or {}) do
    local ok, e = pcall(diloco.recipe.set, r, s)
    if not ok then
      err("%s", tostring(e))
      return nil, 2
    end
  end
  local valid, problems = diloco.recipe.validate(r)
  if not valid then
    err("%s: %d problem%s in the recipe:", pos[1], #problems, #problems == 1 and "" or "s")
    for _, p in ipairs(problems) do io.stderr:write("  ", p, "\n") end
    return nil, 2
  end
  return r
end

-- Runs fn(r, run_opts) (diloco.train.run or diloco.sim.run): with --quiet the summary is
-- printed as JSON, also after a failure (the run saved what it could); returns the exit
-- status (128 + N after signal N) or raises the run's error.
local function train(fn, r, opts, run_opts)
  local ok, summary, interrupted, signo = pcall(fn, r, run_opts)
  if not ok then
    local e = summary
    if type(e) == "table" and e.summary and opts.quiet then
      io.stdout:write(diloco.metrics.line("summary", e.summary, diloco.wall_time()), "\n")
    end
    error(e, 0)
  end
  if opts.quiet then
    io.stdout:write(diloco.metrics.line("summary", summary, diloco.wall_time()), "\n")
    io.stdout:flush() -- a closed stdout here loses nothing: the run is saved
  end
  return interrupted and 128 + (signo or 2) or 0
end

-- The options and recipe of a run/sim command line: opts, pos, r; or nil and the exit
-- status when there is nothing to train (--help, --fields, or a recipe that failed).
local function recipe_command(args, spec, usage)
  local opts, pos = parse(args, spec)
  if opts.help then
    print(usage)
    return nil, 0
  end
  if opts.fields then
    for _, line in ipairs(diloco.recipe.describe_schema()) do print(line) end
    return nil, 0
  end
  local r, code = load_recipe(pos, opts)
  if not r then return nil, code end
  return opts, pos, r
end

local function run(args)
  local opts, pos, r = recipe_command(args, RUN_OPTIONS, RUN_USAGE)
  if not opts then return pos end
  local refused = diloco.recipe.single_island_problems(r) -- several islands or faults: `sim`
  if #refused > 0 then
    for _, p in ipairs(refused) do err("%s: %s", pos[1], p) end
    return 2
  end
  return train(diloco.train.run, r, opts, { metrics = opts.metrics, out = opts.out, resume = opts.resume,
    overwrite = opts.overwrite, quiet = opts.quiet, command = "diloco-lua run " .. table.concat(args, " ") })
end

local SIM_USAGE = [==[
usage: diloco-lua sim RECIPE.lua [--set KEY=VALUE]... [--out DIR] [--overwrite] [--metrics FILE.jsonl]
                                 [--quiet] [--debug]
Trains the recipe's islands (islands.count learners and the syncer, sync.preset) in one
process on a simulated clock and network: every inner step is real, time and links are
virtual (islands.step_time, speed, latency, bandwidth), faults come from chaos.  The
same recipe and seed give the same metrics (wall-clock fields aside).  docs/sim.md.
  --set KEY=VALUE   override a recipe field (--set sync.preset=diloco --set islands.count=4)
  --out DIR         run directory (default: the recipe's out, else runs/NAME): metrics.jsonl,
                    recipe.json, model.safetensors (the global model, for diloco-lua sample)
  --overwrite       replace the run already in OUT
  --metrics FILE    write the JSON-lines metrics here instead of OUT/metrics.jsonl
  --quiet           no progress output; print the summary as JSON at the end
  --fields          list every recipe field with its default and meaning
Exit status: 0 done, 1 failed, 2 bad recipe or options, 128 + N stopped by signal N.]==]

local SIM_OPTIONS = { set = "list", metrics = "value", out = "value", quiet = "flag", help = "flag",
  fields = "flag", debug = "flag", overwrite = "flag", resume = "value" }

local function sim(args)
  local opts, pos, r = recipe_command(args, SIM_OPTIONS, SIM_USAGE)
  if not opts then return pos end
  return train(diloco.sim.run, r, opts, { metrics = opts.metrics, out = opts.out, overwrite = opts.overwrite,
    quiet = opts.quiet, resume = opts.resume, command = "diloco-lua sim " .. table.concat(args, " ") })
end

local sample = require "diloco.sample"
local goodput = require "diloco.goodput"

local commands = {
  run = { run, RUN_USAGE, RUN_OPTIONS },
  sim = { sim, SIM_USAGE, SIM_OPTIONS },
  sample = { function(args) return sample.main(args, parse) end, sample.USAGE, sample.OPTIONS },
  goodput = { function(args) return goodput.main(args, parse) end, goodput.USAGE, goodput.OPTIONS },
}

-- "--debug" anywhere among the options (not as the value of a value option): removed
-- from args, and returned as true.
local function take_debug(args, spec)
  local rest, debug, i = {}, false, 1
  while i <= #args do
    local a = args[i]
    if a == "--debug" then
      debug = true
    else
      rest[#rest + 1] = a
      local name = a:match("^%-%-([%w%-]+)$")
      if name and spec[name] and spec[name] ~= "flag" and args[i + 1] ~= nil then
        i = i + 1
        rest[#rest + 1] = args[i]
      end
    end
    i = i + 1
  end
  return rest, debug
end

-- An error message without the "file.lua:12: " positions of our own code.
local function strip_positions(msg)
  return (tostring(msg):gsub("[%w_%./%-]*%.lua:%d+: ", ""))
end

-- Errors: {usage = msg} -> exit 2 with the usage; {diloco_error = msg[, code = n]} ->
-- exit code (default 1); anything else is an internal error: its message without
-- positions and exit 1, or with --debug the message and the Lua traceback.
function M.main(name, args)
  local cmd = commands[name]
  local rest, trace = take_debug(args, cmd[3])
  local ok, res = xpcall(cmd[1], function(e)
    if not trace then return e end
    if type(e) == "table" then
      e.traceback = debug.traceback("", 2)
      return e
    end
    return debug.traceback(tostring(e), 2)
  end, rest)
  if ok then return res end
  if type(res) == "table" and res.usage then
    err("%s: %s", name, res.usage)
    io.stderr:write(cmd[2], "\n")
    return 2
  end
  if type(res) == "table" and res.diloco_error then
    err("%s", res.diloco_error)
    if res.traceback then io.stderr:write(res.traceback, "\n") end
    return math.tointeger(res.code) or 1
  end
  if trace then
    err("%s: internal error: %s", name, tostring(res))
  else
    err("%s: internal error: %s (run again with --debug for a traceback)", name, strip_positions(res))
  end
  return 1
end

return M
