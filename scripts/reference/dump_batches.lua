-- Writes the exact token batches a recipe's learner trains and evaluates on, so a
-- reference implementation can train on the same data in the same order.
--   diloco-lua scripts/reference/dump_batches.lua RECIPE OUT.bin [--set k=v]...
-- OUT.bin: header line "steps B T eval_batches\n", then steps*B*(T+1) train bytes,
-- then the eval windows (each window: T inputs + the last target, T + 1 bytes): the
-- batches our evaluation uses (diloco.train.eval_batches: eval.batches batches evenly
-- spread over the eval split, or the whole split once when eval.batches reaches its
-- batches_per_epoch).  eval_batches counts the batches written; only when the whole
-- split is written may the last one be short (then the eval part has fewer than
-- eval_batches*B windows: read it by windows, weight each batch by its rows).
local diloco = require "diloco"
local recipe_path, out_path = arg[1], arg[2]
assert(recipe_path and out_path, "usage: dump_batches.lua RECIPE OUT.bin [--set k=v]...")
local r = assert(diloco.recipe.load(recipe_path))
for i = 3, #arg, 2 do
  assert(arg[i] == "--set", "expected --set k=v")
  diloco.recipe.set(r, arg[i + 1])
end
local ok, problems = diloco.recipe.validate(r)
assert(ok, problems and table.concat(problems, "\n"))
assert(r.data.kind == "text" or r.data.kind == "synthetic_text", "text recipes only")
local loaders = diloco.data.open(r.data, 1, 1, r.seed)
local B, T = r.data.batch, r.data.ctx
local neval = #diloco.train.eval_starts(loaders.eval.windows, B, r.eval.batches)
local f = assert(io.open(out_path, "wb"))
f:write(string.format("%d %d %d %d\n", r.steps, B, T, neval))
local windows = 0
local window_bytes = dofile((arg[0]:match("^(.*/)") or "./") .. "window_bytes.lua")
local function write_batch(x, y)
  local bytes, rows = window_bytes(x, y, T)
  windows = windows + rows
  f:write(bytes)
end
for _ = 1, r.steps do write_batch(loaders.train:next()) end
for x, y in diloco.train.eval_batches(loaders, r.eval.batches) do write_batch(x, y) end
f:close()
print(string.format("wrote %s: %d train and %d eval batches of %dx%d (%d eval windows)", out_path, r.steps,
  neval, B, T, windows - r.steps * B))
