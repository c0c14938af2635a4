-- diloco.recipe: the recipe schema, its defaults, validation and --set overrides.
--
-- A recipe file returns diloco.recipe{...}.  Every field has a default and a meaning
-- (docs/recipes.md lists them); validation reports EVERY bad field at once, each with
-- its dotted name, the value and what is allowed.  `--set a.b=v` overrides any field
-- before validation.
local M = {}

-- Field specs.  kind: "number" | "integer" | "string" | "boolean" | "table" | "any".
-- check(v) returns nil when fine, else the "expected ..." text.  A table field
-- with `fields` is a nested section; `open = true` lets it carry extra keys that a
-- later stage validates (model options go to the nn constructor).
-- range(lo, hi[, integer[, lo_open]]): a finite number (or integer) in [lo, hi]
-- ((lo, hi] with lo_open); hi = INF means no upper bound, still finite.
local function num(v)
  if v == math.floor(v) and math.abs(v) < 2 ^ 63 then return string.format("%d", v) end
  return string.format("%g", v)
end

local function range(lo, hi, integer, lo_open)
  local what = integer and "an integer" or "a finite number"
  local text
  if hi == math.huge then
    text = string.format("%s %s %s", what, lo_open and ">" or ">=", num(lo))
  else
    text = string.format("%s in %s%s, %s]", what, lo_open and "(" or "[", num(lo), num(hi))
  end
  return function(v)
    if v ~= v or v == math.huge or v == -math.huge then return text end
    if integer and v ~= math.floor(v) then return text end
    if v < lo or v > hi or (lo_open and v == lo) then return text end
  end
end

local function oneof(...)
  local set, list = {}, { ... }
  for _, v in ipairs(list) do set[v] = true end
  return function(v)
    if not set[v] then return "one of " .. table.concat(list, ", ") end
  end
end

local INF = math.huge

-- "250ms", "30s", "5m", "1.5h", "2d" (or a number of seconds) -> seconds; nil if malformed.
local DURATION_UNITS = { ms = 1e-3, s = 1, m = 60, h = 3600, d = 86400 }
function M.parse_duration(v)
  if type(v) == "number" then return (v == v and v >= 0 and v < INF) and v or nil end
  if type(v) ~= "string" then return nil end
  local num, unit = v:match("^%s*(%d+%.?%d*)%s*(%a+)%s*$")
  local k = unit and DURATION_UNITS[unit]
  if not (num and k) then return nil end
  return tonumber(num) * k
end
local function grace_check(v)
  if v == "adaptive" or v == "off" or M.parse_duration(v) then return nil end
  return 'adaptive, off, or a duration such as "5s", "250ms", "2m"'
end

-- The data fields each data.kind reads (besides kind); any other is refused, so a
-- typo (data.bacth) is not silently ignored.
local DATA_FIELDS = {
  text = { "path", "batch", "ctx", "eval_fraction", "chunk", "drop_line" },
  synthetic_text = { "bytes", "batch", "ctx", "eval_fraction", "chunk" },
  fashion = { "dir", "batch", "classes", "images", "labels", "test_images", "test_labels" },
  images = { "images", "labels", "test_images", "test_labels", "batch", "classes" },
  synthetic_images = { "count", "classes", "batch" },
}

M.schema = {
  name = { kind = "string", default = nil, doc = "run name (default: the recipe file name)" },
  seed = { kind = "integer", default = 0, check = range(0, 2 ^ 53, true),
    doc = "seed of model init, data order and dropout" },
  steps = { kind = "integer", default = 1000, check = range(1, 1e12, true), doc = "inner steps to train" },
  threads = { kind = "integer", default = nil, check = range(1, 256, true),
    doc = "compute threads, oneDNN and OpenBLAS (default: all cores for one learner)" },
  model = { kind = "table|function", default = nil, required = true,
    doc = "{arch = 'gpt'|'vit'|'mlp', ...options of diloco.nn} or a function returning a module" },
  data = { kind = "table", required = true, doc = "the dataset: diloco.data.text{...} etc.",
    per_kind = DATA_FIELDS, fields = {
    kind = { kind = "string", default = nil, required = true,
      check = oneof("text", "fashion", "images", "synthetic_text", "synthetic_images"),
      doc = "dataset kind" },
    path = { kind = "string", default = nil, doc = "text: a file or a directory" },
    images = { kind = "string", default = nil, doc = "images: IDX images file (.gz or plain)" },
    labels = { kind = "string", default = nil, doc = "images: IDX labels file" },
    test_images = { kind = "string", default = nil, doc = "images: held-out IDX images" },
    test_labels = { kind = "string", default = nil, doc = "images: held-out IDX labels" },
    dir = { kind = "string", default = "/usr/share/datasets/fashion-mnist",
      doc = "fashion: directory of the four Fashion-MNIST files" },
    batch = { kind = "integer", default = 16, check = range(1, 1e6, true), doc = "sequences/images per step" },
    ctx = { kind = "integer", default = 64, check = range(1, 1e6, true), doc = "text: tokens per sequence" },
    eval_fraction = { kind = "number", default = 0.05, check = range(0, 0.5), doc = "text: share held out" },
    chunk = { kind = "integer", default = 4096, check = range(64, 1e9, true), doc = "text: split granularity in bytes" },
    drop_line = { kind = "string", default = nil, doc = "text: drop lines equal to this (fortunes: '%')" },
    bytes = { kind = "integer", default = 200000, check = range(1000, 1e9, true), doc = "synthetic_text: size" },
    count = { kind = "integer", default = 2000, check = range(10, 1e8, true), doc = "synthetic_images: examples" },
    classes = { kind = "integer", default = 10, check = range(2, 256, true),
      doc = "images, synthetic_images: number of classes (fashion: 10)" },
  } },
  inner = { kind = "table", doc = "inner optimizer: diloco.optim.adamw{...} etc.", fields = {
    kind = { kind = "string", default = "adamw", check = oneof("adamw", "sgd", "nesterov"), doc = "inner optimizer" },
    lr = { kind = "number", default = 3e-3, check = range(0, INF), doc = "peak learning rate" },
    beta1 = { kind = "number", default = 0.9, check = range(0, 0.999999), doc = "adamw beta1" },
    beta2 = { kind = "number", default = 0.95, check = range(0, 0.999999), doc = "adamw beta2" },
    eps = { kind = "number", default = 1e-8, check = range(0, 1, false, true), doc = "adamw epsilon" },
    weight_decay = { kind = "number", default = 0.1, check = range(0, INF), doc = "decoupled weight decay" },
    momentum = { kind = "number", default = 0.9, check = range(0, 0.999999), doc = "sgd/nesterov momentum" },
    schedule = { kind = "string", default = "cosine", check = oneof("constant", "cosine", "linear"),
      doc = "learning-rate schedule after warm-up" },
    warmup = { kind = "integer", default = nil, check = range(0, 1e12, true),
      doc = "linear warm-up steps (default: min(100, steps / 10))" },
    min_lr = { kind = "number", default = 0, check = range(0, INF), doc = "final learning rate of the decay" },
    clip = { kind = "number", default = 1.0, check = range(0, INF), doc = "global grad-norm clip (0 = off)" },
    no_decay = { kind = "table", default = nil, check = function(v)
      local n = 0
      for _ in pairs(v) do n = n + 1 end
      if n ~= #v then return "a list of Lua patterns (strings)" end
      for i, p in ipairs(v) do
        if type(p) ~= "string" then return string.format("a list of Lua patterns, item %d is a %s", i, type(p)) end
        local ok, e = pcall(string.find, "", p)
        if not ok then
          return string.format("a list of Lua patterns, item %d (%q) is malformed: %s", i, p,
            tostring(e):gsub("^.-:%d+: ", ""))
        end
      end
    end, doc = "Lua patterns of parameter names without weight decay" },
  } },
  outer = { kind = "table", doc = "outer optimizer: diloco.optim.nesterov{...}", fields = {
    kind = { kind = "string", default = "nesterov", check = oneof("nesterov", "sgd"), doc = "outer optimizer" },
    lr = { kind = "number", default = 0.7, check = range(0, INF), doc = "outer learning rate" },
    momentum = { kind = "number", default = 0.9, check = range(0, 0.999999), doc = "outer momentum" },
  } },
  sync = { kind = "table", doc = "synchronisation between islands", fields = {
    preset = { kind = "string", default = "decoupled", check = oneof("dp", "diloco", "streaming", "decoupled"),
      doc = "algorithm preset (used when islands.count > 1)" },
    H = { kind = "integer", default = 24, check = range(1, 1e9, true), doc = "inner steps between syncs of a fragment" },
    fragments = { kind = "integer", default = 4, check = range(1, 4096, true), doc = "fragments P" },
    tau = { kind = "integer", default = 2, check = range(0, 1e6, true), doc = "overlap steps" },
    quorum = { kind = "integer", default = 1, check = range(1, 1e6, true), doc = "minimum quorum K" },
    codec = { kind = "string", default = "f32", check = oneof("f32", "bf16", "fp8", "int8", "int4", "e3m0"),
      doc = "outer-gradient codec, uplink (docs/codecs.md)" },
    codec_down = { kind = "string", default = "f32", check = oneof("f32", "bf16"),
      doc = "codec of the merged fragments sent to the learners" },
    block = { kind = "integer", default = 128, check = function(v)
      if v < 32 or v > 256 or v % 2 ~= 0 then return "an even integer in [32, 256]" end
    end, doc = "block size of the int8/int4/e3m0 scales" },
    error_feedback = { kind = "boolean", default = false,
      doc = "add each contribution's quantization error to the next" },
    plan = { kind = "string", default = "balanced", check = oneof("balanced", "strided", "sequential"),
      doc = "how tensors are assigned to fragments (docs/fragments.md)" },
    split_rows = { kind = "boolean", default = false, doc = "split a tensor larger than total/P by rows" },
    alpha = { kind = "number", default = 0, check = range(0, 1), doc = "mixing on arrival: alpha*local + (1-alpha)*global" },
    grace = { kind = "string|number", default = "adaptive", check = grace_check,
      doc = "wait after quorum: adaptive, off, or a duration" },
    weighting = { kind = "string", default = "tokens2_steps", check = oneof("tokens2_steps", "tokens", "uniform"),
      doc = "contribution weight: tokens^2/steps, tokens or uniform" },
    merge = { kind = "string", default = "rda", check = oneof("rda", "mean"),
      doc = "merge of contributions: radial-directional averaging or weighted mean" },
    ring = { kind = "integer", default = 4, check = range(1, 64, true),
      doc = "versions of each fragment kept to anchor stale contributions" },
  } },
  islands = { kind = "table", doc = "the learners", fields = {
    count = { kind = "integer", default = 1, check = range(1, 1, true),
      doc = "learners; this version trains one (multi-island training arrives with the syncer)" },
    speed = { kind = "table", default = nil, doc = "relative speed per island" },
  } },
  eval = { kind = "table", doc = "held-out evaluation", fields = {
    every = { kind = "integer", default = 100, check = range(0, 1e12, true), doc = "steps between evals (0 = end only)" },
    batches = { kind = "integer", default = 8, check = range(1, 1e9, true), doc = "held-out batches per eval" },
  } },
  log = { kind = "table", doc = "progress and step metrics", fields = {
    every = { kind = "integer", default = nil, check = range(1, 1e12, true),
      doc = "steps between step metrics / plain progress lines (default: steps / 20)" },
  } },
  checkpoint = { kind = "table", doc = "periodic checkpoints", fields = {
    every = { kind = "integer", default = 0, check = range(0, 1e12, true),
      doc = "steps between checkpoints in the output directory (0 = by minutes only)" },
    minutes = { kind = "number", default = 5, check = range(0, 1e6),
      doc = "minutes between checkpoints (0 = by steps only); a run always saves at its end" },
    keep = { kind = "integer", default = 3, check = range(1, 1e6, true),
      doc = "step-numbered checkpoints kept in the output directory (the newest)" },
  } },
  out = { kind = "string", default = nil, doc = "output directory (default runs/NAME)" },
  hooks = { kind = "table", doc = "functions called during training", fields = {
    on_step = { kind = "function", default = nil, doc = "f(info) after each step" },
    on_eval = { kind = "function", default = nil, doc = "f(info) after each eval" },
    lr = { kind = "function", default = nil, doc = "f(step, lr) -> lr for this step (overrides the schedule)" },
  } },
  chaos = { kind = "any", default = nil, check = function(v)
    return "nil: fault injection arrives with multi-island training" end,
    doc = "failure schedule (not available in this version)" },
}

local function describe(v, depth)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" and #v > 0 and (depth or 0) < 2 then
    local parts = {}
    for i = 1, math.min(#v, 8) do parts[i] = describe(v[i], (depth or 0) + 1) end
    if #v > 8 then parts[#parts + 1] = "..." end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

local function kind_ok(spec_kind, v)
  if spec_kind == "any" then return true end
  for k in spec_kind:gmatch("[^|]+") do
    if k == "integer" then
      if type(v) == "number" and v == math.floor(v) then return true end
    elseif type(v) == k then
      return true
    end
  end
  return false
end

-- Fills defaults into t (in place) and appends problems to errs.
local function check_section(t, fields, prefix, errs, open, per_kind)
  local allowed, for_kind = fields, ""
  if per_kind and type(t.kind) == "string" and per_kind[t.kind] then
    allowed, for_kind = { kind = true }, string.format(" for %skind = %q", prefix, t.kind)
    for _, k in ipairs(per_kind[t.kind]) do allowed[k] = true end
  end
  for key in pairs(t) do
    if type(key) ~= "string" then
      errs[#errs + 1] = string.format("%s: key %s is not a field name", prefix ~= "" and prefix:sub(1, -2) or "recipe",
        describe(key))
    elseif not allowed[key] and not open then
      local names = {}
      for k in pairs(allowed) do names[#names + 1] = k end
      table.sort(names)
      errs[#errs + 1] = string.format("%s%s: unknown field%s (allowed: %s)", prefix, key, for_kind,
        table.concat(names, ", "))
    end
  end
  for key, spec in pairs(fields) do
    local v, name = t[key], prefix .. key
    if v == nil then
      if spec.required then
        errs[#errs + 1] = string.format("%s: missing (%s)", name, spec.doc)
      elseif spec.fields then
        v = {}
        t[key] = v
      else
        t[key] = spec.default
      end
    end
    if v ~= nil then
      if not kind_ok(spec.kind, v) then
        errs[#errs + 1] = string.format("%s = %s: expected %s%s", name, describe(v),
          (spec.kind:gsub("|", " or ")), spec.doc and " (" .. spec.doc .. ")" or "")
      elseif spec.check then
        local expected = spec.check(v)
        if expected then errs[#errs + 1] = string.format("%s = %s: expected %s", name, describe(v), expected) end
      end
      if spec.fields and type(v) == "table" then
        check_section(v, spec.fields, name .. ".", errs, spec.open, spec.per_kind)
      end
      if spec.kind == "integer" and type(v) == "number" and math.type(v) == "float" and v == math.floor(v) then
        t[key] = math.tointeger(v)
      end
    end
  end
end

-- An error raised by diloco.nn's option checks, without its position.
local function plain(msg)
  if type(msg) == "table" and msg.diloco_error then return tostring(msg.diloco_error) end
  return (tostring(msg):gsub("^[^%s:]+%.lua:%d+: ", ""))
end

-- The model options of a recipe's (or a file's) model table, checked by diloco.nn
-- with every default filled: opts, or nil and the message ("model.arch ...",
-- "model: GPT: heads = 3 does not divide dim = 32").  Allocates nothing.
function M.model_options(model)
  local arch = model.arch
  if arch ~= "gpt" and arch ~= "vit" and arch ~= "mlp" then
    return nil, string.format("model.arch = %s: expected one of \"gpt\", \"vit\", \"mlp\"", describe(arch))
  end
  local o = {}
  for k, v in pairs(model) do
    if k ~= "arch" then o[k] = v end
  end
  local ok, res = pcall(require("diloco.nn").model_options, arch, o)
  if not ok then return nil, "model: " .. plain(res) end
  return res
end

-- The input the data gives a classifier, when known without opening files
-- (images: only the IDX header knows, see M.check_data).
local IMAGE_PIXELS = { fashion = 28 * 28, synthetic_images = 28 * 28 }

-- Rules between the model and the data it is given.  o: the checked model options.
local function check_model_data(arch, o, d, pixels, errs)
  local text = d.kind == "text" or d.kind == "synthetic_text"
  if arch == "gpt" then
    if not text then
      errs[#errs + 1] = string.format("model.arch = \"gpt\" needs text data, data.kind is %s", describe(d.kind))
      return
    end
    if o.vocab ~= 256 then
      errs[#errs + 1] = string.format("model.vocab = %d: expected 256 (text data is byte-level: tokens 0..255)", o.vocab)
    end
    if o.ctx < d.ctx then
      errs[#errs + 1] = string.format("data.ctx = %d is longer than model.ctx = %d", d.ctx, o.ctx)
    end
    return
  end
  if text then
    errs[#errs + 1] = string.format("model.arch = %s classifies images, data.kind is %s", describe(arch), describe(d.kind))
    return
  end
  if o.classes ~= d.classes then
    errs[#errs + 1] = string.format("model.classes = %d but data.classes = %d: the model needs one output per class",
      o.classes, d.classes)
  end
  if pixels then
    local input = arch == "mlp" and o.input or o.channels * o.image * o.image
    if input ~= pixels then
      errs[#errs + 1] = arch == "mlp"
        and string.format("model.input = %d but the data's images have %d values (%s): expected input = %d",
          input, pixels, d.kind, pixels)
        or string.format("model.channels * model.image^2 = %d but the data's images have %d values (%s)",
          input, pixels, d.kind)
    end
  end
end

-- Cross-field rules that one field's spec cannot see.
local function check_sync(r, errs)
  local sy, isl = r.sync, r.islands
  if sy.quorum > isl.count then
    errs[#errs + 1] = string.format("sync.quorum = %d but islands.count = %d: quorum must be <= the number of "
      .. "learners", sy.quorum, isl.count)
  end
  if sy.tau >= sy.H then
    errs[#errs + 1] = string.format("sync.tau = %d: the overlap must be below sync.H = %d (a fragment is applied "
      .. "before it is due again)", sy.tau, sy.H)
  end
  if isl.speed ~= nil then
    if #isl.speed ~= isl.count then
      errs[#errs + 1] = string.format("islands.speed has %d entries: expected one per island (islands.count = %d)",
        #isl.speed, isl.count)
    end
    for i, v in pairs(isl.speed) do
      if math.type(i) ~= "integer" or type(v) ~= "number" or v ~= v or v <= 0 or v == INF then
        errs[#errs + 1] = string.format("islands.speed[%s] = %s: expected a finite number > 0 (relative speed)",
          tostring(i), tostring(v))
      end
    end
  end
end

local function check_relations(r, errs)
  check_sync(r, errs)
  local d = r.data
  if d.kind == "text" and not d.path then
    errs[#errs + 1] = "data.path: missing (data.kind = \"text\" needs a file or directory)"
  end
  if d.kind == "images" and not (d.images and d.labels) then
    errs[#errs + 1] = "data.images / data.labels: missing (data.kind = \"images\" needs both IDX files)"
  end
  if d.kind == "fashion" and d.classes ~= 10 then
    errs[#errs + 1] = string.format("data.classes = %d: Fashion-MNIST has 10 classes", d.classes)
  end
  local inner = r.inner
  if inner.min_lr > inner.lr then
    errs[#errs + 1] = string.format("inner.min_lr = %s is above inner.lr = %s: the schedule decays from lr to min_lr",
      describe(inner.min_lr), describe(inner.lr))
  end
  if inner.kind == "nesterov" and inner.momentum <= 0 then
    errs[#errs + 1] = string.format("inner.momentum = %s: nesterov needs momentum > 0 (or inner.kind = \"sgd\")",
      describe(inner.momentum))
  end
  if type(r.model) == "table" then
    local o, e = M.model_options(r.model)
    if not o then
      errs[#errs + 1] = e
    else
      local before = #errs
      check_model_data(r.model.arch, o, d, IMAGE_PIXELS[d.kind], errs)
      if #errs == before then
        local est = require("diloco.estimate")
        local okm, merr = est.check(est.training(r.model.arch, o, d, inner.kind))
        if not okm then errs[#errs + 1] = "memory: " .. merr end
      end
    end
  end
  if r.inner.warmup == nil then r.inner.warmup = math.min(100, r.steps // 10) end
  if r.inner.warmup >= r.steps and r.inner.warmup > 0 and r.inner.schedule ~= "constant" then
    errs[#errs + 1] = string.format("inner.warmup = %d: must be below steps = %d", r.inner.warmup, r.steps)
  end
end

-- After the data is open (diloco.data.open's result): the rules that need what only
-- the files know (an IDX set's image size).  Returns true, or nil and the problems.
function M.check_data(r, loaders)
  if type(r.model) ~= "table" or loaders.kind ~= "images" or not (loaders.rows and loaders.cols) then return true end
  local o, e = M.model_options(r.model)
  if not o then return nil, { e } end
  local errs = {}
  check_model_data(r.model.arch, o, r.data, loaders.rows * loaders.cols, errs)
  if #errs > 0 then return nil, errs end
  return true
end

-- diloco.recipe{...}: marks the table as a recipe (validation happens in M.validate,
-- after --set overrides).
local recipe_mt = { __name = "diloco.recipe" }
function M.new(t)
  if type(t) ~= "table" then error("diloco.recipe: expected a table, got " .. type(t), 2) end
  return setmetatable(t, recipe_mt)
end

function M.is_recipe(t)
  return getmetatable(t) == recipe_mt
end

-- Validates and fills defaults in place.  Returns r, or nil and the list of problems.
function M.validate(r)
  local errs = {}
  check_section(r, M.schema, "", errs, false)
  if #errs == 0 then check_relations(r, errs) end
  if #errs > 0 then return nil, errs end
  return r
end

-- Parses the v of --set k=v: numbers, true/false, Lua table literals {…}, quoted or
-- bare strings.
local function parse_value(s)
  if s == "true" then return true end
  if s == "false" then return false end
  if s == "nil" then return nil end
  local n = math.tointeger(tonumber(s)) or tonumber(s)
  if n then return n end
  if s:match("^%s*{") or s:match("^%s*[\"']") then
    local f = load("return " .. s, "--set", "t", {})
    local ok, v = pcall(f or error)
    if f and ok then return v end
    error(string.format("cannot parse %q as a Lua value", s), 0)
  end
  return s
end

-- Applies one "a.b.c=value" override.  Raises a message naming the key on error.
function M.set(r, assignment)
  local key, value = assignment:match("^([%w_%.]+)=(.*)$")
  if not key then
    error(string.format("--set %s: expected KEY=VALUE with a dotted key (e.g. inner.lr=1e-3)", assignment), 0)
  end
  local parts = {}
  for p in (key .. "."):gmatch("([^%.]*)%.") do parts[#parts + 1] = p end
  for _, p in ipairs(parts) do
    if not p:match("^[%a_][%w_]*$") then
      error(string.format("--set %s: malformed key '%s': expected field names joined by single dots "
        .. "(e.g. inner.lr=1e-3)", assignment, key), 0)
    end
  end
  local t, spec = r, { fields = M.schema }
  for i = 1, #parts - 1 do
    local p = parts[i]
    local sub = spec and spec.fields and spec.fields[p]
    if type(t[p]) == "function" then
      error(string.format("--set %s: %s is a function in this recipe; edit the recipe instead", assignment,
        table.concat(parts, ".", 1, i)), 0)
    end
    if t[p] == nil then
      if sub or (spec and (spec.open or spec.kind == "table|function")) then
        t[p] = {}
      else
        error(string.format("--set %s: unknown field %s", assignment, table.concat(parts, ".", 1, i)), 0)
      end
    elseif type(t[p]) ~= "table" then
      error(string.format("--set %s: %s is a %s, not a section", assignment, table.concat(parts, ".", 1, i),
        type(t[p])), 0)
    end
    t, spec = t[p], sub or { open = true }
  end
  local ok, v = pcall(parse_value, value)
  if not ok then error("--set " .. assignment .. ": " .. v, 0) end
  t[parts[#parts]] = v
end

-- Loads a recipe file: runs it and checks it returned diloco.recipe{...} (or a table).
function M.load(path)
  local f, err = loadfile(path)
  if not f then return nil, err end
  local ok, r = pcall(f)
  if not ok then return nil, string.format("%s: error while running the recipe: %s", path, tostring(r)) end
  if type(r) ~= "table" then
    return nil, string.format("%s: the recipe must return diloco.recipe{...}, it returned %s", path, type(r))
  end
  if not r.name then r.name = path:match("([^/]+)%.lua$") or path:match("[^/]+$") end
  return r
end

-- Lines of documentation for docs/recipes.md and `diloco-lua run --help`.
function M.describe_schema()
  local lines = {}
  local function walk(fields, prefix)
    local keys = {}
    for k in pairs(fields) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local s = fields[k]
      if s.fields then
        walk(s.fields, prefix .. k .. ".")
      else
        lines[#lines + 1] = string.format("%-22s %-10s %-12s %s", prefix .. k, s.kind,
          s.default == nil and (s.required and "(required)" or "-") or tostring(s.default), s.doc or "")
      end
    end
  end
  walk(M.schema, "")
  return lines
end

setmetatable(M, { __call = function(_, t) return M.new(t) end })
return M
