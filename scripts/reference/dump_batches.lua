-- Writes the exact token batches a recipe's learner trains and evaluates on, so a
-- reference implementation can train on the same data in the same order.
--   diloco-lua scripts/reference/dump_batches.lua RECIPE OUT.bin [--set k=v]...
-- OUT.bin: header line "steps B T eval_batches\n", then steps*B*(T+1) train bytes,
-- then eval_batches*B*(T+1) eval bytes (each window: T inputs + the last target).
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
local f = assert(io.open(out_path, "wb"))
f:write(string.format("%d %d %d %d\n", r.steps, B, T, r.eval.batches))
local function dump(loader, n)
  for _ = 1, n do
    local x, y = loader:next()
    local xs, ys = x:tolist(), y:tolist()
    local parts = {}
    for b = 1, B do
      local row = {}
      for t = 1, T do row[t] = string.char(math.tointeger(xs[b][t])) end
      row[T + 1] = string.char(math.tointeger(ys[b][T]))
      parts[b] = table.concat(row)
    end
    f:write(table.concat(parts))
  end
end
dump(loaders.train, r.steps)
loaders.eval:reset()
dump(loaders.eval, r.eval.batches)
f:close()
print(string.format("wrote %s: %d train and %d eval batches of %dx%d", out_path, r.steps, r.eval.batches, B, T))
