-- Training speed of the charlm GPT in diloco-lua (run by scripts/bench/train).
-- Prints: tokens_per_s, flops_per_token, gemm (the backend used), peak_gflops (the
-- faster backend's matmul at 1024^3 on this thread count) and each backend's peak.
-- Same model, optimizer step and clip as recipes/charlm.lua; random token batches so
-- data loading is not measured (it is not on either side).
local diloco = require "diloco"
local steps = tonumber(arg[1]) or 60
local cfg = { vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true, seed = 1 }
local B, T = 16, 64

local model = diloco.nn.GPT(cfg)
local plist = model:parameters()
local params = diloco.Params(plist)
local opt = diloco.Optimizer(params, { kind = "adamw", lr = 1e-3, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.1 })
local g = diloco.Generator(5)
local batches = {}
for i = 1, 8 do
  local x = (g:rand(B, T + 1) * 255.99):tolist()
  local xs, ys = {}, {}
  for b = 1, B do
    xs[b], ys[b] = {}, {}
    for t = 1, T do
      xs[b][t] = math.floor(x[b][t])
      ys[b][t] = math.floor(x[b][t + 1])
    end
  end
  batches[i] = { diloco.tensor(xs), diloco.tensor(ys) }
end

local function step(i)
  local bt = batches[(i - 1) % #batches + 1]
  params:zero_grad()
  local loss = model:loss(bt[1], bt[2])
  loss:backward()
  params:clip_grad_norm(1.0)
  opt:step(1e-3)
  loss:free()
end

for i = 1, 5 do step(i) end -- warm-up: sizes the storage cache
collectgarbage()
local best = math.huge
for _ = 1, 3 do
  local t0 = diloco.clock()
  for i = 1, steps do step(i) end
  best = math.min(best, diloco.clock() - t0)
end
local tps = steps * B * T / best

local C, L, V = cfg.dim, cfg.layers, cfg.vocab
local fwd = 2 * (L * 12 * C * C + C * V) + L * 2 * 2 * T * C
-- sgemm peak at 1024^3 on each backend this build has, same thread count
local a, b = diloco.randn(1024, 1024), diloco.randn(1024, 1024)
local function peak()
  for _ = 1, 3 do a:matmul(b):free() end
  local tb = math.huge
  for _ = 1, 5 do
    local t0 = diloco.clock()
    for _ = 1, 10 do a:matmul(b):free() end
    tb = math.min(tb, (diloco.clock() - t0) / 10)
  end
  return 2 * 1024 ^ 3 / tb / 1e9
end
local used, peaks, best = diloco.gemm_backend(), {}, 0
for _, name in ipairs({ "openblas", "onednn" }) do
  if pcall(diloco.gemm_backend, name) then
    peaks[name] = peak()
    best = math.max(best, peaks[name])
  end
end
diloco.gemm_backend(used)
print(string.format("tokens_per_s %.1f", tps))
print(string.format("flops_per_token %.0f", 3 * fwd))
print(string.format("gemm %s", used))
print(string.format("peak_gflops %.1f", best))
print(string.format("peak_gflops_openblas %.1f", peaks.openblas))
print(string.format("peak_gflops_onednn %.1f", peaks.onednn or 0))
