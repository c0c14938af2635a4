-- Training speed of the GPT in diloco-lua (run by scripts/bench/train).
-- Usage: diloco-lua train_ours.lua [--dim 128] [--layers 4] [--heads 4] [--ctx 64]
--          [--batch 16] [--steps 50] [--reps 2] [--threads N] [--peak]
-- Prints "key value" lines: tokens_per_s (best of --reps timed runs of --steps steps
-- after 5 warm-up steps), params, flops_per_token, gemm (the backend used, from
-- DILOCO_GEMM), threads; with --peak only each backend's sgemm GF/s at 1024^3 on this
-- thread count.  Same model, optimizer step and clip as recipes/charlm.lua (at charlm's
-- size); random token batches so data loading is measured on neither side.
local diloco = require "diloco"

local o = { dim = 128, layers = 4, heads = 4, ctx = 64, batch = 16, steps = 50, reps = 2 }
local i = 1
while arg[i] do
  local k = arg[i]:match("^%-%-(%w+)$")
  if k == "peak" then
    o.peak = true
    i = i + 1
  elseif k and (o[k] or k == "threads") and tonumber(arg[i + 1]) then
    o[k] = math.tointeger(tonumber(arg[i + 1])) or error("train_ours: " .. arg[i] .. " wants an integer")
    i = i + 2
  else
    error("train_ours: unknown or incomplete argument " .. arg[i])
  end
end
if o.threads then diloco.set_num_threads(o.threads) end

-- sgemm at 1024^3, best of 5 rounds of 10 calls
local function peak()
  local a, b = diloco.randn(1024, 1024), diloco.randn(1024, 1024)
  for _ = 1, 3 do a:matmul(b):free() end
  local tb = math.huge
  for _ = 1, 5 do
    local t0 = diloco.clock()
    for _ = 1, 10 do a:matmul(b):free() end
    tb = math.min(tb, (diloco.clock() - t0) / 10)
  end
  return 2 * 1024 ^ 3 / tb / 1e9
end

if o.peak then
  local used = diloco.gemm_backend()
  for _, name in ipairs({ "openblas", "onednn" }) do
    if pcall(diloco.gemm_backend, name) then print(string.format("peak_%s %.1f", name, peak())) end
  end
  diloco.gemm_backend(used)
  return
end

local B, T, C, L, V = o.batch, o.ctx, o.dim, o.layers, 256
local model = diloco.nn.GPT { vocab = V, ctx = T, dim = C, layers = L, heads = o.heads, tied = true, seed = 1 }
local params = diloco.Params(model:parameters())
local opt = diloco.Optimizer(params, { kind = "adamw", lr = 1e-3, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.1 })
local g = diloco.Generator(5)
local batches = {}
for n = 1, 8 do
  local x = (g:rand(B, T + 1) * (V - 0.01)):tolist()
  local xs, ys = {}, {}
  for b = 1, B do
    xs[b], ys[b] = {}, {}
    for t = 1, T do
      xs[b][t] = math.floor(x[b][t])
      ys[b][t] = math.floor(x[b][t + 1])
    end
  end
  batches[n] = { diloco.tensor(xs), diloco.tensor(ys) }
end

local function step(n)
  local bt = batches[(n - 1) % #batches + 1]
  params:zero_grad()
  local loss = model:loss(bt[1], bt[2])
  loss:backward()
  params:clip_grad_norm(1.0)
  opt:step(1e-3)
  loss:free()
end

for n = 1, 5 do step(n) end -- warm-up: sizes the storage cache
collectgarbage()
local best = math.huge
for _ = 1, o.reps do
  local t0 = diloco.clock()
  for n = 1, o.steps do step(n) end
  best = math.min(best, diloco.clock() - t0)
end

-- PaLM counting: 6 x the parameters of the products (blocks and the tied head) + attention
local fwd = 2 * (L * 12 * C * C + C * V) + L * 2 * 2 * T * C
print(string.format("tokens_per_s %.1f", o.steps * B * T / best))
print(string.format("params %d", model:num_params()))
print(string.format("flops_per_token %d", 3 * fwd))
print(string.format("gemm %s", diloco.gemm_backend()))
print(string.format("threads %d", diloco.num_threads()))
