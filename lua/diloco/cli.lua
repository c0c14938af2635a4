-- diloco.cli: the `diloco-lua run` and `diloco-lua sample` subcommands.
-- main(name, args) returns the process exit status: 0 ok, 1 failure, 2 usage or
-- recipe error, 130 interrupted by Ctrl-C (after saving).
local diloco = require "diloco"
local M = {}

local function err(fmt, ...)
  io.stderr:write("diloco-lua: ", string.format(fmt, ...), "\n")
end

local RUN_USAGE = [==[
usage: diloco-lua run RECIPE.lua [--set KEY=VALUE]... [--metrics FILE.jsonl] [--out DIR]
                                 [--resume CHECKPOINT] [--quiet]
  --set KEY=VALUE   override a recipe field, nested with dots (--set inner.lr=1e-3)
  --metrics FILE    write JSON-lines metrics (step, eval, summary events)
  --out DIR         output directory (default: the recipe's out, else runs/NAME)
  --resume CKPT     continue from OUT/checkpoint.safetensors of an earlier run
  --quiet           no progress output
  --fields          list every recipe field with its default and meaning]==]

local SAMPLE_USAGE = [==[
usage: diloco-lua sample MODEL.safetensors [--prompt TEXT] [--tokens N] [--temperature T]
                                          [--top-k K] [--seed S]]==]

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

local function run(args)
  local opts, pos = parse(args, { set = "list", metrics = "value", out = "value", resume = "value",
    quiet = "flag", help = "flag", fields = "flag" })
  if opts.help then
    print(RUN_USAGE)
    return 0
  end
  if opts.fields then
    for _, line in ipairs(diloco.recipe.describe_schema()) do print(line) end
    return 0
  end
  if #pos ~= 1 then error({ usage = #pos == 0 and "missing RECIPE" or "expected one RECIPE, got " .. #pos }, 0) end
  local r, lerr = diloco.recipe.load(pos[1])
  if not r then
    err("%s", lerr)
    return 2
  end
  for _, s in ipairs(opts.set or {}) do
    local ok, e = pcall(diloco.recipe.set, r, s)
    if not ok then
      err("%s", tostring(e))
      return 2
    end
  end
  local valid, problems = diloco.recipe.validate(r)
  if not valid then
    err("%s: %d problem%s in the recipe:", pos[1], #problems, #problems == 1 and "" or "s")
    for _, p in ipairs(problems) do io.stderr:write("  ", p, "\n") end
    return 2
  end
  local summary, interrupted = diloco.train.run(r, { metrics = opts.metrics, out = opts.out, resume = opts.resume,
    quiet = opts.quiet })
  if opts.quiet then print(diloco.json_encode(summary)) end
  return interrupted and 130 or 0
end

local function sample(args)
  local opts, pos = parse(args, { prompt = "value", tokens = "value", temperature = "value", ["top-k"] = "value",
    seed = "value", help = "flag" })
  if opts.help then
    print(SAMPLE_USAGE)
    return 0
  end
  if #pos ~= 1 then error({ usage = "expected one MODEL.safetensors" }, 0) end
  local function num(name, default, lo, hi, integer)
    local v = opts[name]
    if v == nil then return default end
    local n = tonumber(v)
    if not n or n < lo or n > hi or (integer and n ~= math.floor(n)) then
      error({ usage = string.format("--%s %s: expected %s in [%s, %s]", name, v, integer and "an integer" or "a number",
        lo, hi) }, 0)
    end
    return integer and math.tointeger(n) or n
  end
  local ntok = num("tokens", 200, 1, 1e6, true)
  local temperature = num("temperature", 0.8, 0, 100, false)
  local top_k = num("top-k", nil, 1, 256, true)
  local seed = num("seed", 0, 0, 2 ^ 53, true)
  local t, meta = diloco.load_safetensors(pos[1])
  if not t then
    err("%s", meta)
    return 1
  end
  local spec_json = meta["diloco.model"]
  if not spec_json then
    err("%s: no diloco.model metadata, so the architecture is unknown (the recipe gave its model as a function, " ..
      "or the file was not written by diloco-lua run); sample needs model = { arch = \"gpt\", ... }", pos[1])
    return 1
  end
  local spec, jerr = diloco.json_decode(spec_json)
  if type(spec) ~= "table" then
    err("%s: metadata diloco.model is not a JSON object: %s", pos[1], tostring(jerr))
    return 1
  end
  if spec.arch ~= "gpt" then
    err("%s: the model is a %s, sample needs a byte-level GPT", pos[1], tostring(spec.arch))
    return 1
  end
  local model = diloco.train.build_model(spec, 0)
  for _, p in ipairs(model:parameters()) do
    local src = t[p[1]]
    if not src or src.numel ~= p[2].numel then
      err("%s: tensor '%s' is missing or has the wrong size", pos[1], p[1])
      return 1
    end
    p[2]:copy(src)
  end
  model:eval()
  local prompt = opts.prompt or "\n"
  local ids = { prompt:byte(1, -1) }
  local out = model:generate(ids, ntok, { temperature = temperature, top_k = top_k, rng = diloco.Generator(seed) })
  local chars = {}
  for i, id in ipairs(out) do chars[i] = string.char(id) end
  io.write(prompt, table.concat(chars), "\n")
  return 0
end

local commands = { run = { run, RUN_USAGE }, sample = { sample, SAMPLE_USAGE } }

function M.main(name, args)
  local cmd = commands[name]
  local ok, res = pcall(cmd[1], args)
  if ok then return res end
  if type(res) == "table" and res.usage then
    err("%s: %s", name, res.usage)
    io.stderr:write(cmd[2], "\n")
    return 2
  end
  if type(res) == "table" and res.diloco_error then
    err("%s", res.diloco_error)
    return 1
  end
  error(res, 0)
end

return M
