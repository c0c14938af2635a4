-- diloco.sample: the `diloco-lua sample` subcommand, text from a saved byte-level GPT.
--
--   diloco-lua sample runs/charlm/model.safetensors --prompt "The " --tokens 100
--
-- main(args, parse) returns the exit status; errors are raised as {usage = msg}
-- (exit 2, bad options), {diloco_error = msg, code = 2} (a missing file, model options
-- out of range) or {diloco_error = msg} (exit 1, a bad file), which diloco.cli reports.
-- The options, their defaults and ranges are diloco.cli's M.commands.sample.
local diloco = require "diloco"
local M = {}

local function usage(fmt, ...)
  error({ usage = string.format(fmt, ...) }, 0)
end

local function bad_file(fmt, ...)
  error({ diloco_error = string.format(fmt, ...) }, 0)
end

local function shape_str(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end

-- The GPT described by a file's diloco.model metadata (spec, decoded) with the
-- file's tensors t in it.  Before anything is built: the options are checked as a
-- recipe's model section is (a bad one: exit 2), and the model's size is estimated
-- and refused above the machine's memory (exit 2).  Then every parameter must be in
-- the file with its exact shape, the file may hold nothing else, and every weight
-- must be finite (a bad file: exit 1).
function M.load_model(path, t, spec)
  if spec.arch ~= "gpt" then
    bad_file("%s: the model is a %s, sample needs a byte-level GPT", path, tostring(spec.arch))
  end
  local o, oerr = diloco.recipe.model_options(spec)
  if not o then error({ diloco_error = string.format("%s: metadata diloco.model: %s", path, oerr), code = 2 }, 0) end
  if o.vocab ~= 256 then
    error({ diloco_error = string.format("%s: metadata diloco.model: vocab = %d: sample needs a byte-level GPT "
      .. "(vocab 256)", path, o.vocab), code = 2 }, 0)
  end
  local ok, merr = diloco.estimate.check(diloco.estimate.inference("gpt", o))
  if not ok then error({ diloco_error = string.format("%s: metadata diloco.model: %s", path, merr), code = 2 }, 0) end
  local model = diloco.nn.GPT(o)
  local names = {}
  for _, p in ipairs(model:parameters()) do
    local name, dst = p[1], p[2]
    names[name] = true
    local src = t[name]
    if not src then bad_file("%s: tensor '%s' of the model is missing from the file", path, name) end
    local want, got = dst.shape, src.shape
    local same = #want == #got
    for d = 1, #want do same = same and want[d] == got[d] end
    if not same then
      bad_file("%s: tensor '%s' has shape %s, the model described by its metadata needs %s", path, name,
        shape_str(got), shape_str(want))
    end
    -- NaN or Inf anywhere makes x * 0 NaN
    local probe = src:scale(0):sum():item()
    if probe ~= 0 then bad_file("%s: tensor '%s' holds NaN or infinite values", path, name) end
    dst:copy(src)
  end
  local extra = {}
  for name in pairs(t) do
    if not names[name] then extra[#extra + 1] = name end
  end
  if #extra > 0 then
    table.sort(extra)
    bad_file("%s: tensor '%s' is not a parameter of the model its metadata describes%s", path, extra[1],
      #extra > 1 and string.format(" (and %d more)", #extra - 1) or "")
  end
  return model
end

-- parse: diloco.cli's option parser, args -> opts (typed, checked, defaults filled in),
-- positional.
function M.main(args, parse)
  local opts, pos = parse(args)
  if #pos ~= 1 then usage(#pos == 0 and "missing MODEL.safetensors" or "expected one MODEL.safetensors, got %d", #pos) end
  local ntok, temperature, top_k, seed = opts.tokens, opts.temperature, opts["top-k"], opts.seed
  local prompt = opts.prompt
  if prompt == "" then usage("--prompt \"\": expected a non-empty text (the model continues it)") end
  local path = pos[1]
  local probe = io.open(path, "rb")
  if not probe then
    local _, oerr = io.open(path, "rb")
    error({ diloco_error = string.format("%s: %s (expected a model.safetensors written by diloco-lua run or sim)",
      path, tostring(oerr):gsub("^[^:]*: ", "")), code = 2 }, 0)
  end
  probe:close()
  local t, meta = diloco.load_safetensors(path)
  if not t then bad_file("%s", meta) end
  local spec_json = meta["diloco.model"]
  if not spec_json then
    bad_file("%s: no diloco.model metadata, so the architecture is unknown (the recipe gave its model as a "
      .. "function, or the file was not written by diloco-lua run); sample needs model = { arch = \"gpt\", ... }",
      path)
  end
  local spec, jerr = diloco.json_decode(spec_json)
  if type(spec) ~= "table" then
    bad_file("%s: metadata diloco.model is not a JSON object: %s", path, tostring(jerr))
  end
  local model = M.load_model(path, t, spec)
  model:eval()
  local ids = { prompt:byte(1, -1) }
  local out = model:generate(ids, ntok, { temperature = temperature, top_k = top_k, rng = diloco.Generator(seed) })
  local chars = {}
  for i, id in ipairs(out) do chars[i] = string.char(id) end
  io.write(prompt, table.concat(chars), "\n")
  return 0
end

return M
