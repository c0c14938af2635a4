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
-- Units: us, ms, s, m, h, d, y (365 d).
local DURATION_UNITS = { us = 1e-6, ms = 1e-3, s = 1, m = 60, h = 3600, d = 86400, y = 365 * 86400 }
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

local DURATION_FORM = 'a duration such as "20s", "250ms", "5m", "1.5h" (units us, ms, s, m, h, d, y) or seconds as '
  .. "a number"
-- check of a duration field: >= 0, or > 0 with positive.
local function duration_check(positive)
  return function(v)
    local s = M.parse_duration(v)
    if not s then return DURATION_FORM end
    if positive and s <= 0 then return "a duration > 0: " .. DURATION_FORM end
  end
end

-- "10Gbps", "2.5Gbps", "100Mbps", "1MB/s", "500kB/s", "inf" (or a number of bytes per
-- second, math.huge allowed) -> bytes per second > 0; nil if malformed.  bps are bits.
local RATE_UNITS = {
  bps = 1 / 8, kbps = 1e3 / 8, Kbps = 1e3 / 8, Mbps = 1e6 / 8, Gbps = 1e9 / 8, Tbps = 1e12 / 8,
  ["B/s"] = 1, ["kB/s"] = 1e3, ["KB/s"] = 1e3, ["MB/s"] = 1e6, ["GB/s"] = 1e9, ["TB/s"] = 1e12,
  ["KiB/s"] = 1024, ["MiB/s"] = 1024 ^ 2, ["GiB/s"] = 1024 ^ 3,
}
function M.parse_rate(v)
  if type(v) == "number" then return (v == v and v > 0) and v or nil end
  if type(v) ~= "string" then return nil end
  if v:match("^%s*inf%s*$") then return INF end
  local num, unit = v:match("^%s*(%d+%.?%d*)%s*([%a/]+)%s*$")
  local k = unit and RATE_UNITS[unit]
  if not (num and k) or tonumber(num) <= 0 then return nil end
  return tonumber(num) * k
end
local RATE_FORM = 'a rate > 0 such as "10Gbps", "2.5Gbps", "100Mbps", "1MB/s", "500kB/s", "inf", or bytes per '
  .. "second as a number"
local function rate_check(v)
  if not M.parse_rate(v) then return RATE_FORM end
end

-- The limits of the real runtime's WAN emulation (the transport's, docs/transport.md): a
-- link given in a recipe is shaped by it under run/syncer, so it must be one it can make.
M.LINK_RATE_MIN, M.LINK_LATENCY_MAX = 1000, 60
-- nil, or what is wrong with a link's bandwidth (bytes/s) or latency (s) for the runtime.
local function link_problem(bandwidth, latency)
  if bandwidth and bandwidth < M.LINK_RATE_MIN then
    return "bandwidth", string.format("at least %d bytes/s (8kbps, the least the runtime's link emulation caps to) "
      .. "or \"inf\"", M.LINK_RATE_MIN)
  end
  if latency and latency > M.LINK_LATENCY_MAX then
    return "latency", string.format("at most %d s (the runtime's link emulation)", M.LINK_LATENCY_MAX)
  end
end

-- A list of Lua patterns (strings that compile).
local function pattern_list(v)
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
end

-- The sync presets (docs/algorithm.md section 5): the defaults of every field a recipe does
-- not set.  The recipe's own fields (and --set) always win.  Defined once, in C
-- (core/run.c, dlc_run_preset_params): read here through diloco.machine.preset.
local PRESET_FIELDS = { "H", "fragments", "tau", "quorum", "grace", "weighting", "merge", "alpha", "blocking" }
M.PRESETS = {}
for _, name in ipairs({ "dp", "diloco", "streaming", "decoupled" }) do
  local c, p = require("diloco").machine.preset(name), {}
  for _, k in ipairs(PRESET_FIELDS) do
    local v = c["sync." .. k]
    p[k] = math.type(v) == "float" and math.tointeger(v) or v -- (alpha 0, as a recipe writes it)
  end
  M.PRESETS[name] = p
end
local DEFAULT_PRESET = "decoupled"

-- The run's fields (core/run.c's table, read through diloco.machine.fields): the bounds
-- and meaning of every sync and outer field the syncer and learners agree on, defined
-- once in C.  run_check(name) refuses a value outside them with the text C prints too.
local RUN_FIELDS = {}
for _, f in ipairs(require("diloco").machine.fields()) do RUN_FIELDS[f.name] = f end
local function run_field(name)
  return RUN_FIELDS[name] or error("recipe: " .. name .. " is not a run field (core/run.c)")
end
local function run_check(name)
  local f = run_field(name)
  assert(f.min, name .. " has no bounds in core/run.c")
  local integer = f.type == "integer"
  return function(v)
    if v ~= v or (v == math.huge and f.max ~= math.huge) or v == -math.huge then return f.expect end
    if integer and v ~= math.floor(v) then return f.expect end
    if v < f.min or v > f.max or (f.min_open and v == f.min) or (f.max_open and v == f.max) then return f.expect end
  end
end
local function run_doc(name) return run_field(name).doc end

local function quorum_check(v)
  local text = 'an integer >= 1, "all" (every live learner) or a function(live_count, info) -> integer'
  if type(v) == "function" or v == "all" then return nil end
  -- (an integer a Lua integer holds: 1e300 is integral, but no count of learners)
  if type(v) ~= "number" or v ~= v or v == INF or v ~= math.floor(v) or v < 1 or v > 2 ^ 31 then return text end
end

-- Island fields: the defaults at the top of islands, each island's own in its table.
local function speed_check(v)
  if v ~= v or v <= 0 or v == INF then return "a finite number > 0 (relative speed)" end
end
local ISLAND_FIELDS = {
  speed = { kind = "number", default = nil, check = speed_check, doc = "relative speed" },
  batch = { kind = "integer", default = nil, check = range(1, 1e6, true),
    doc = "sequences/images per step" },
  shard = { kind = "integer", default = nil, doc = "data shard" },
  ranks = { kind = "integer", default = nil, check = range(1, 4096, true),
    doc = "MPI ranks of the island: data parallel inside it, R x the batch (docs/mpi.md)" },
  latency = { kind = "string|number", default = nil, check = duration_check(false),
    doc = "one-way latency of its link to the syncer" },
  bandwidth = { kind = "string|number", default = nil, check = rate_check,
    doc = "bandwidth of its link" },
}

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
  name = { kind = "string", default = nil, check = function(v)
    -- the default output directory is runs/NAME: one path component, never out of runs/
    if v == "" or v == "." or v == ".." or v:find("[/%z]") then
      return "a name of one path component: not empty, '.' or '..', without '/' (the output directory is runs/NAME; "
        .. "--out puts a run anywhere)"
    end
  end, doc = "run name (default: the recipe file name)" },
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
    no_decay = { kind = "table", default = nil, check = pattern_list,
      doc = "Lua patterns of parameter names without weight decay" },
  } },
  outer = { kind = "table", doc = "outer optimizer: diloco.optim.nesterov{...}", fields = {
    kind = { kind = "string", default = "nesterov", check = oneof("nesterov", "sgd"), doc = "outer optimizer" },
    lr = { kind = "number", default = 0.7, check = run_check("outer.lr"), doc = run_doc("outer.lr") },
    momentum = { kind = "number", default = 0.9, check = run_check("outer.momentum"),
      doc = run_doc("outer.momentum") },
  } },
  sync = { kind = "table", doc = "synchronisation between islands", fields = {
    preset = { kind = "string", default = DEFAULT_PRESET, check = oneof("dp", "diloco", "streaming", "decoupled"),
      doc = "algorithm preset: the defaults of the fields marked (preset) (docs/algorithm.md section 5)" },
    H = { kind = "integer", preset = true, check = run_check("sync.H"), doc = run_doc("sync.H") },
    fragments = { kind = "integer", preset = true, check = run_check("sync.fragments"),
      doc = run_doc("sync.fragments") },
    tau = { kind = "integer", preset = true, check = run_check("sync.tau"), doc = run_doc("sync.tau") },
    quorum = { kind = "integer|string|function", preset = true, check = quorum_check,
      doc = "minimum quorum K: an integer, \"all\" (live learners) or f(live_count, info) -> integer" },
    blocking = { kind = "boolean", preset = true,
      doc = "the learner waits for the merged fragment tau steps after sending it" },
    codec = { kind = "string", default = "f32",
      check = oneof("f32", "bf16", "fp8", "int8", "int4", "e3m0", "sparse2", "sparse4"),
      doc = "outer-gradient codec, uplink (docs/codecs.md; sparse2/4: the block/64 largest values a block, "
        .. "with error_feedback)" },
    codec_down = { kind = "string", default = "f32", check = oneof("f32", "bf16"),
      doc = "codec of the merged fragments sent to the learners" },
    block = { kind = "integer", default = 128, check = function(v)
      if v < 32 or v > 256 or v % 2 ~= 0 then return "an even integer in [32, 256]" end
    end, doc = "block size of the int8/int4/e3m0 scales and the sparse codecs' blocks" },
    error_feedback = { kind = "boolean", default = false,
      doc = "add each contribution's quantization error to the next" },
    plan = { kind = "string", default = "balanced", check = oneof("balanced", "strided", "sequential"),
      doc = "how tensors are assigned to fragments (docs/fragments.md)" },
    split_rows = { kind = "boolean", default = false, doc = "split a tensor larger than total/P by rows" },
    alpha = { kind = "number", preset = true, check = run_check("sync.alpha"), doc = run_doc("sync.alpha") },
    grace = { kind = "string|number", preset = true, check = grace_check,
      doc = "wait after quorum: adaptive, off, or a duration" },
    grace_s = { kind = "number", default = nil, check = run_check("sync.grace_s"),
      doc = "set by validation: " .. run_doc("sync.grace_s") .. ", else nil" },
    grace_gamma = { kind = "number", default = 0.8, check = run_check("sync.grace_gamma"),
      doc = run_doc("sync.grace_gamma") },
    ema = { kind = "number", default = 0.5, check = run_check("sync.ema"), doc = run_doc("sync.ema") },
    weighting = { kind = "string", preset = true, check = oneof("tokens2_steps", "tokens", "uniform"),
      doc = "contribution weight: tokens^2/steps, tokens or uniform" },
    merge = { kind = "string", preset = true, check = oneof("rda", "mean"),
      doc = "merge of contributions: radial-directional averaging or weighted mean" },
    embeddings = { kind = "table", default = { "^wte%.", "^wpe%.", "emb" }, check = pattern_list,
      doc = "Lua patterns of tensor names merged by weighted mean under rda" },
    schedule = { kind = "function", default = nil,
      doc = "f(learner, step, fragments) -> list of 1-based fragments due after that step (replaces H/offsets)" },
    ring = { kind = "integer", default = 4, check = run_check("sync.ring"), doc = run_doc("sync.ring") },
    final_flush = { kind = "boolean", default = false,
      doc = "at its end each learner sends every fragment trained since its last apply (none in flight), merged "
        .. "before the final eval (false: those steps are not in the final model; docs/sim.md)" },
    dp_history = { kind = "integer", default = 0, check = range(0, 65536, true),
      doc = "dp: averaged gradients the syncer keeps for restarted learners to replay (0: as many as 512 MiB hold, "
        .. "8 to 1024)" },
  } },
  islands = { kind = "table", after = true,
    doc = "the learners: {count = M, speed = ...} or a list of island tables {speed, batch, shard, latency, "
      .. "bandwidth}", fields = {
    count = { kind = "integer", default = nil, check = range(1, 64, true),
      doc = "learners M (default: the length of the list, else 1)" },
    speed = { kind = "number|table", default = nil,
      doc = "relative speed: one number for all, or one per island (count form)" },
    step_time = { kind = "string|number", default = 1.0, check = duration_check(true),
      doc = "virtual seconds of one inner step at speed 1 with data.batch (sim)" },
    jitter = { kind = "number", default = 0, check = function(v)
        if v ~= v or v < 0 or v > 4 then return "a coefficient of variation in [0, 4]" end end,
      doc = "sim: the spread of each inner step's time around its nominal, a coefficient of variation "
        .. "(log-normal, mean 1; 0: every step takes exactly its time)" },
    cores = { kind = "integer", default = nil, check = range(1, 4096, true),
      doc = "sim: the cores the islands share, one compute thread each (learner processes on one host): a step "
        .. "that starts while n islands compute lasts n / cores times longer when n > cores, and step_time is a "
        .. "step on a core of its own (absent: each island on hardware of its own)" },
    timeout = { kind = "string|number", default = nil, check = duration_check(true),
      doc = "sim: silence after which the syncer counts an island lost (default 10 x the run's step time; run uses "
        .. "runtime.timeout)" },
    stop = { kind = "string", default = "horizon", check = function(v)
        if v ~= "horizon" and v ~= "steps" then return "\"horizon\" or \"steps\"" end end,
      doc = "sim: when an island stops: \"horizon\" (at steps x the run's step time; a faster island trains more "
        .. "steps) or \"steps\" (when its schedule step reaches `steps`, as run's learners do; the run ends when "
        .. "every live island has, and the learning rate follows the schedule step)" },
    latency = { kind = "string|number", default = 0.02, check = duration_check(false),
      doc = "default one-way latency of a link to the syncer" },
    bandwidth = { kind = "string|number", default = 312500000, check = rate_check,
      doc = "default link bandwidth: bytes/s, or \"2.5Gbps\", \"100Mbps\", \"1MB/s\", \"inf\"" },
    batch = { kind = "integer", default = nil, check = range(1, 1e6, true),
      doc = "default batch of every island (default data.batch)" },
    ranks = { kind = "integer", default = nil, check = range(1, 4096, true),
      doc = "default MPI ranks of every island (1: one process; R > 1: an MPI job whose ranks average their "
        .. "gradients, R x the batch; docs/mpi.md)" },
    syncers = { kind = "integer", default = nil, check = range(1, 16, true),
      doc = "the syncer in S shards, each owning the fragments dealt to it (run, syncer; docs/shards.md); "
        .. "at most sync.fragments, not with dp (default 1: one syncer)" },
    standbys = { kind = "boolean", default = false,
      doc = "each syncer shard with a standby that takes over when it fails (run, sim; docs/shards.md, "
        .. "\"Standbys\"); not with dp" },
    list = { kind = "table", default = nil, doc = "the island tables (same as the array part of islands)" },
    links = { kind = "table|boolean", default = nil,
      doc = "set by validation: the links the real runtime shapes with runtime.emulate_links, one table {latency, bandwidth} per island with "
        .. "what the recipe gave, or false (none given: the runtime shapes nothing)" },
  } },
  runtime = { kind = "table", doc = "the real runtime (run with several islands, syncer, learner)", fields = {
    heartbeat = { kind = "string|number", default = 1.0, check = duration_check(true),
      doc = "seconds between heartbeats on a link with nothing else to send" },
    timeout = { kind = "string|number", default = 5.0, check = duration_check(true),
      doc = "a link silent this long is lost (a paused, hung or cut-off learner)" },
    join_timeout = { kind = "string|number", default = 120, check = duration_check(true),
      doc = "a learner process must have joined the syncer within this of its start; a syncer with none connected waits this long for those that did not say BYE" },
    start_timeout = { kind = "string|number", default = 60, check = duration_check(false),
      doc = "a new run starts when all its learners have connected, or this long after the first did (0: each starts as it joins, at the others' step)" },
    refusals = { kind = "string|number", default = 10, check = duration_check(true),
      doc = "the syncer reports refused connections and messages in bounded form: the first of each reason in this interval as a fault event, then one refusals event with the counts by reason and address" },
    drain = { kind = "string|number", default = 30, check = duration_check(false),
      doc = "at its end a learner waits at most this for its last contributions to be merged" },
    codec_thread = { kind = "boolean", default = true,
      doc = "a learner encodes its contributions on a thread of its own and its I/O thread decodes the bf16 fragments that arrive; f32 ones are checked and copied into place on the compute thread (false: both on the compute thread, inside its calls; data parallel: always there)" },
    emulate_links = { kind = "boolean", default = false,
      doc = "true: run and syncer emulate each island's latency and bandwidth on its link to the syncer (false: the real links as they are; chaos link events are emulated either way)" },
    elastic = { kind = "boolean", default = true,
      doc = "false: while a learner is lost every other one is stopped until it is back (non-elastic data parallel)" },
    syncer_every = { kind = "integer", default = 100, check = range(0, 1e12, true),
      doc = "merges between two checkpoints of the syncer in OUT/syncer (0: by checkpoint.minutes only)" },
    restarts = { kind = "integer", default = 20, check = range(0, 1e6, true),
      doc = "crashes of one learner after which run stops restarting it (the run goes on without it)" },
  } },
  eval = { kind = "table", doc = "held-out evaluation", fields = {
    every = { kind = "integer", default = 100, check = range(0, 1e12, true), doc = "steps between evals (0 = end only)" },
    batches = { kind = "integer", default = 8, check = range(1, 1e9, true),
      doc = "held-out batches per eval, evenly spread over the eval split (>= its batches: all of it once)" },
    final_all = { kind = "boolean", default = true,
      doc = "at the end, also the whole eval split (summary final_eval_loss_all; images: the final eval is the whole split already)" },
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
    on_merge = { kind = "function", default = nil,
      doc = "several islands: f(info) after each merge decision (fragment, version, contributors, ...)" },
    on_fault = { kind = "function", default = nil, doc = "several islands: f(info) at each fault and recovery" },
  } },
  chaos = { kind = "table", default = nil, after = true,
    doc = "faults for sim and run (several islands): scripted events in the array part, random = {mtbf, down, "
      .. "learners, exponential_down}, seed (diloco.chaos)" },
}

-- The text of each number given with --set, as the user wrote it ("1e13", "0x10"),
-- so a message about the field shows that rather than 10000000000000: written[t][key].
local written = setmetatable({}, { __mode = "k" })
-- The fields each --set wrote: from_set[t][key] = true (a field a list in the recipe
-- overrides is then an error, not an override that silently does nothing).
local from_set = setmetatable({}, { __mode = "k" })

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
      elseif type(spec.default) == "table" then -- a copy: recipes never share a default
        t[key] = table.move(spec.default, 1, #spec.default, 1, {})
      else
        t[key] = spec.default
      end
    end
    if v ~= nil then
      local shown = written[t] and written[t][key] or describe(v)
      if not kind_ok(spec.kind, v) then
        errs[#errs + 1] = string.format("%s = %s: expected %s%s", name, shown,
          (spec.kind:gsub("|", " or ")), spec.doc and " (" .. spec.doc .. ")" or "")
      elseif spec.check then
        local expected = spec.check(v)
        if expected then errs[#errs + 1] = string.format("%s = %s: expected %s", name, shown, expected) end
      end
      if spec.fields and type(v) == "table" and not spec.after then
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

local function is_int(v)
  return type(v) == "number" and v == v and v == math.floor(v) and math.abs(v) < 2 ^ 53
end
local function count_keys(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- Fills the sync fields the recipe does not set from its preset (before validation,
-- so a given field, or one from --set, wins).
local function fill_preset(r)
  if r.sync == nil then r.sync = {} end
  local sy = r.sync
  if type(sy) ~= "table" then return end
  local p = M.PRESETS[sy.preset == nil and DEFAULT_PRESET or sy.preset]
  if not p then return end
  for k, v in pairs(p) do
    if sy[k] == nil then sy[k] = v end
  end
end


-- Once the model is built (the driver calls it): nil, or the error text when there
-- are more fragments than tensors to put in them.
function M.check_fragments(r, n_tensors)
  local P = r.sync.fragments
  if P > n_tensors and not r.sync.split_rows then
    return string.format("sync.fragments = %d but the model has %d tensors: expected at most %d "
      .. "(or sync.split_rows = true)", P, n_tensors, n_tensors)
  end
end

-- What `diloco-lua run` (one island, no faults) refuses in a validated recipe: a list
-- of messages, empty when it can run it.
function M.single_island_problems(r)
  local out = {}
  local c = r.chaos
  if r.islands.count == 1 and c and (#c.events > 0 or c.random) then
    out[#out + 1] = string.format("chaos: %d scripted event%s%s: `diloco-lua run` trains one island without "
      .. "faults; inject them on several islands (islands.count > 1: learner processes under `run`, or the "
      .. "virtual-time driver with `diloco-lua sim RECIPE`)", #c.events, #c.events == 1 and "" or "s",
      c.random and " and a random policy" or "")
  end
  return out
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
-- The checks recipe_chaos, recipe_islands, recipe_rules and recipe_set share (internal: not
-- part of the API).
M._check = { describe = describe, count_keys = count_keys, is_int = is_int, link_problem = link_problem,
  DURATION_FORM = DURATION_FORM, RATE_FORM = RATE_FORM, ISLAND_FIELDS = ISLAND_FIELDS, check_section = check_section,
  from_set = from_set, speed_check = speed_check, written = written, check_model_data = check_model_data,
  IMAGE_PIXELS = IMAGE_PIXELS }

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
  fill_preset(r)
  check_section(r, M.schema, "", errs, false)
  require("diloco.recipe_islands").normalize(r, errs)
  require("diloco.recipe_chaos").normalize(r, errs)
  if #errs == 0 then require("diloco.recipe_rules").check(r, errs) end
  if #errs > 0 then return nil, errs end
  return r
end

-- Applies one "a.b.c=value" override (lua/diloco/recipe_set.lua).  Raises a message
-- naming the key on error.
function M.set(r, assignment) return require("diloco.recipe_set").apply(r, assignment) end

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
        local default = s.preset and "(preset)" or s.required and "(required)" or s.default == nil and "-"
          or type(s.default) == "table" and describe(s.default) or tostring(s.default)
        lines[#lines + 1] = string.format("%-22s %-10s %-12s %s", prefix .. k, s.kind, default, s.doc or "")
      end
    end
  end
  walk(M.schema, "")
  return lines
end

setmetatable(M, { __call = function(_, t) return M.new(t) end })
return M
