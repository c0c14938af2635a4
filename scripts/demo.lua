-- demo.lua: a tiny model trained with autograd, end to end in a few seconds.
-- A 2-layer MLP learns to classify points of two interleaved spirals; plain SGD with
-- momentum written in Lua over the C tensor ops.  Run: build/diloco-lua scripts/demo.lua
local diloco = require "diloco"
diloco.seed(1)

-- data: two spirals, 512 points each, labels 0/1 (index values are 0-based)
local n, pts, labels = 512, {}, {}
local g = diloco.Generator(7)
local noise = g:randn(2 * n, 2):tolist()
for i = 0, 2 * n - 1 do
  local class, k = i % 2, i // 2
  local r = 0.2 + 2.8 * k / n
  local a = 3.5 * math.pi * k / n + class * math.pi
  pts[#pts + 1] = { r * math.cos(a) + 0.05 * noise[i + 1][1], r * math.sin(a) + 0.05 * noise[i + 1][2] }
  labels[#labels + 1] = class
end
local x, y = diloco.tensor(pts), diloco.tensor(labels)

-- model: 2 -> 64 -> 64 -> 2, tanh
local function param(scale, ...)
  return (diloco.randn(...) * scale):requires_grad_() -- a fresh leaf
end
local W1, b1 = param(1.0, 2, 64), diloco.zeros(64):requires_grad_()
local W2, b2 = param(1 / 8, 64, 64), diloco.zeros(64):requires_grad_()
local W3, b3 = param(1 / 8, 64, 2), diloco.zeros(2):requires_grad_()
local params = { W1, b1, W2, b2, W3, b3 }

local function forward(inp)
  local h = inp:matmul(W1):bias_add(b1):tanh()
  h = h:matmul(W2):bias_add(b2):tanh()
  return h:matmul(W3):bias_add(b3)
end

local velocity = {}
for i, p in ipairs(params) do velocity[i] = diloco.zeros(p.shape) end

local lr, mu, steps = 0.1, 0.9, 1500
local t0 = os.clock()
for step = 1, steps do
  for _, p in ipairs(params) do p:zero_grad() end
  local loss = forward(x):cross_entropy(y)
  loss:backward()
  diloco.no_grad(function()
    for i, p in ipairs(params) do
      velocity[i]:copy(velocity[i] * mu + p.grad)
      p:copy(p - velocity[i] * lr)
    end
  end)
  if step == 1 or step % 300 == 0 then
    local pred = diloco.no_grad(forward, x):argmax(-1)
    local correct = 0
    for i = 1, 2 * n do
      if pred[i] == labels[i] then correct = correct + 1 end
    end
    print(string.format("step %4d  loss %.4f  accuracy %5.1f%%", step, loss:item(), 100 * correct / (2 * n)))
  end
end
print(string.format("trained %d steps in %.2f s of CPU time", steps, os.clock() - t0))
