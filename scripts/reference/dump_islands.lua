-- Writes everything the PyTorch mirror of the multi-island presets (diloco_ref.py) needs:
-- our initial model, our fragment plan, the effective settings, every learner's train
-- batches and the eval batches.  The mirror reads only these files.
--   diloco-lua scripts/reference/dump_islands.lua RECIPE OUTDIR [--learners M] [--set k=v]...
-- OUTDIR/init.safetensors  the initial parameters Θ0 (train.build_model(r.model, r.seed))
-- OUTDIR/plan.json         {"fragments": [[tensor names of fragment 1 in order], ...], ...}
-- OUTDIR/meta.json         learners, steps, batch, ctx, model, inner, outer, sync, eval
-- OUTDIR/learner-m.bin     learner m's (1..M) train batches: header "steps B T 0\n", then
--                          steps*B*(T+1) bytes (shard m of M, as dump_batches.lua writes them)
-- OUTDIR/eval.bin          header "0 B T n\n", then the n eval batches (rows in meta eval.rows)
-- Learners: r.islands.count when > 1, else --learners M (islands.count is limited to 1 by
-- the recipe validation until multi-island training lands), else 1.
-- The preset fills the sync fields the recipe and --set leave unset (docs/algorithm.md §5):
--   diloco: fragments 1, tau 0, uniform, mean, alpha 0; streaming: uniform, mean, alpha 0.5;
--   decoupled: tokens2_steps, rda, alpha 0; dp: one averaged AdamW step per step.
-- A field given explicitly (in the recipe or with --set) wins over the preset.
local diloco = require "diloco"
local usage = "usage: dump_islands.lua RECIPE OUTDIR [--learners M] [--set k=v]..."
local recipe_path, outdir = arg[1], arg[2]
assert(recipe_path and outdir, usage)
local r = assert(diloco.recipe.load(recipe_path))
local learners_opt
local i = 3
while i <= #arg do
  if arg[i] == "--set" then
    diloco.recipe.set(r, assert(arg[i + 1], usage))
  elseif arg[i] == "--learners" then
    learners_opt = math.tointeger(tonumber(arg[i + 1]))
    assert(learners_opt and learners_opt >= 1, "--learners: expected an integer >= 1")
  else
    error("unexpected argument " .. tostring(arg[i]) .. "\n" .. usage)
  end
  i = i + 2
end
-- the sync fields given explicitly, before validation fills the defaults
local explicit = {}
for k, v in pairs(r.sync or {}) do explicit[k] = v end
local ok, problems = diloco.recipe.validate(r)
assert(ok, problems and table.concat(problems, "\n"))
assert(r.data.kind == "text" or r.data.kind == "synthetic_text", "text recipes only")
assert(type(r.model) == "table" and r.model.arch == "gpt", "GPT recipes only (model.arch = \"gpt\")")
assert(r.inner.kind == "adamw", "the mirror trains with AdamW only (inner.kind = \"adamw\")")
assert(r.inner.no_decay == nil, "inner.no_decay: the mirror uses the default decay rule only")
assert(not r.hooks.lr, "hooks.lr: the mirror follows the recipe's schedule only")
assert(r.sync.schedule == nil, "sync.schedule: the mirror follows the H/offset schedule only")
assert(not r.sync.split_rows, "sync.split_rows = true: the mirror handles whole-tensor fragments only")

local count = r.islands.count or 1
local M = (count > 1 and count) or learners_opt or 1
-- homogeneous islands only: one batch size (speed, latency, bandwidth do not matter here)
assert(r.islands.batch == nil or r.islands.batch == r.data.batch, "islands.batch: the mirror needs data.batch everywhere")
for j, isl in ipairs(r.islands.list or r.islands) do
  if type(isl) == "table" then
    assert(isl.batch == nil or isl.batch == r.data.batch, "islands[" .. j .. "].batch: homogeneous islands only")
    assert(isl.shard == nil or isl.shard == j, "islands[" .. j .. "].shard: the mirror gives learner m shard m")
  end
end
local sy = r.sync
-- the preset table of recipe.lua when it has one (validation then already applied it),
-- else the same values (docs/algorithm.md section 5)
local presets = diloco.recipe.PRESETS or {
  dp = { H = 1, fragments = 1, tau = 0, weighting = "uniform", merge = "mean", alpha = 0 },
  diloco = { H = 24, fragments = 1, tau = 0, weighting = "uniform", merge = "mean", alpha = 0 },
  streaming = { H = 24, fragments = 4, tau = 2, weighting = "uniform", merge = "mean", alpha = 0.5 },
  decoupled = { H = 24, fragments = 4, tau = 2, weighting = "tokens2_steps", merge = "rda", alpha = 0 },
}
local preset_fields = assert(presets[sy.preset], "unknown sync.preset")
local sync = {}
for _, k in ipairs { "H", "fragments", "tau", "alpha", "weighting", "merge", "plan", "quorum", "codec" } do
  local v = sy[k]
  if explicit[k] == nil and preset_fields[k] ~= nil then v = preset_fields[k] end
  sync[k] = v
end
sync.preset = sy.preset
sync.split_rows = false
sync.embeddings = sy.embeddings or { "^wte%.", "^wpe%.", "emb" } -- Lua patterns
local given = {}
for k in pairs(explicit) do given[#given + 1] = k end
table.sort(given)
sync.explicit = given
assert(sync.tau < sync.H or sync.preset == "dp", "sync.tau must be below sync.H")
if sync.codec ~= "f32" then
  io.stderr:write("dump_islands: note: sync.codec = " .. sync.codec .. " is ignored, the mirror exchanges f32\n")
end

assert(os.execute("mkdir -p '" .. outdir:gsub("'", "'\\''") .. "'"))
local function write(path, text)
  local f = assert(io.open(outdir .. "/" .. path, "wb"))
  f:write(text)
  f:close()
end

-- the initial model and the plan
local model = diloco.train.build_model(r.model, r.seed)
local plist = model:parameters()
local params = diloco.Params(plist)
local names = params:names()
assert(diloco.save_safetensors(outdir .. "/init.safetensors", plist, { ["diloco.model"] = diloco.json_encode(r.model) }))
local P = sync.preset == "dp" and 1 or sync.fragments
local plan = diloco.Plan(params, { kind = sync.plan, fragments = P, split_rows = false })
local frags = {}
for f = 1, #plan do
  local list = {}
  for j, v in ipairs(plan:views(f)) do
    assert(v.row0 == 0 and v.numel == plist[v.tensor].tensor.numel, "a split tensor in the plan: " .. v.name)
    list[j] = v.name
  end
  frags[f] = list
end
local opt = diloco.optim.build(params, r.inner)
local decays = {}
for _, n in ipairs(names) do decays[n] = opt:decays(n) end
write("plan.json", diloco.json_encode({ kind = plan.kind, fragments = frags, plan_hash = plan.plan_hash,
  tensors = names, decays = decays }, { indent = 2 }) .. "\n")

local inner = {}
for _, k in ipairs { "kind", "lr", "beta1", "beta2", "eps", "weight_decay", "schedule", "warmup", "min_lr", "clip" } do
  inner[k] = r.inner[k]
end
local B, T = r.data.batch, r.data.ctx

-- batches
local window_bytes_T = dofile((arg[0]:match("^(.*/)") or "./") .. "window_bytes.lua")
local function window_bytes(x, y) return window_bytes_T(x, y, T) end
local eval_loaders
for m = 1, M do
  local loaders = diloco.data.open(r.data, m, M, r.seed)
  if m == 1 then eval_loaders = loaders end
  local f = assert(io.open(string.format("%s/learner-%d.bin", outdir, m), "wb"))
  f:write(string.format("%d %d %d %d\n", r.steps, B, T, 0))
  for _ = 1, r.steps do
    local bytes, rows = window_bytes(loaders.train:next())
    assert(rows == B)
    f:write(bytes)
  end
  f:close()
end

-- eval batches: train.eval_batches (an evenly spread subset) when it exists, else the
-- sequential reset + next of train.evaluate and dump_batches.lua
local evals, how = {}, "sequential"
if type(diloco.train.eval_batches) == "function" then
  local okb, err = pcall(function()
    local it = diloco.train.eval_batches(eval_loaders, r.eval.batches)
    if type(it) == "function" then
      for x, y in it do evals[#evals + 1] = { window_bytes(x, y) } end
    else
      for j, e in ipairs(it) do evals[j] = { window_bytes(e.x or e[1], e.y or e[2]) } end
    end
  end)
  if okb then
    how = "train.eval_batches"
  else -- (a Lua tree newer than the build: the loader lacks what eval_batches calls)
    io.stderr:write("dump_islands: note: train.eval_batches failed (" .. tostring(err) ..
      "), dumping the sequential eval batches instead\n")
    evals = {}
  end
end
if how == "sequential" then
  eval_loaders.eval:reset()
  for j = 1, r.eval.batches do evals[j] = { window_bytes(eval_loaders.eval:next()) } end
end
-- header "0 B T n" (B: the largest batch), then the batches back to back; their rows
-- (the last may be smaller) are in meta.json eval.rows
local f = assert(io.open(outdir .. "/eval.bin", "wb"))
local rows, maxrows = {}, 0
for j, e in ipairs(evals) do
  rows[j] = e[2]
  maxrows = math.max(maxrows, e[2])
end
f:write(string.format("%d %d %d %d\n", 0, maxrows, T, #evals))
for _, e in ipairs(evals) do f:write(e[1]) end
f:close()
write("meta.json", diloco.json_encode({
  recipe = recipe_path, seed = r.seed, learners = M, steps = r.steps, batch = B, ctx = T,
  tokens_per_batch = B * T, model = r.model, inner = inner,
  outer = { kind = r.outer.kind, lr = r.outer.lr, momentum = r.outer.momentum },
  sync = sync, eval = { every = r.eval.every, batches = #evals, rows = rows, how = how },
}, { indent = 2, sort_keys = true }) .. "\n")
print(string.format("wrote %s: %s preset, %d learners x %d steps of %dx%d, %d fragments (%s), %d eval batches (%s)",
  outdir, sync.preset, M, r.steps, B, T, #frags, plan.kind, #evals, how))
