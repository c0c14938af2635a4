-- Per-call cost of small tensor ops called from Lua (run by scripts/bench/op_overhead).
-- Prints "name ns_per_call" lines; tensors have 4 elements so the math is negligible.
local diloco = require "diloco"
local n = tonumber(arg and arg[1]) or 2000000
local a, b = diloco.randn(4), diloco.randn(4)

local function bench(name, f)
  f(1000)
  local best = math.huge
  for _ = 1, 3 do
    local t0 = os.clock()
    f(n)
    best = math.min(best, os.clock() - t0)
  end
  print(string.format("%-16s %8.1f", name, best / n * 1e9))
end

bench("lua_call", function(k) local f = function(x, y) return x end; for _ = 1, k do f(a, b) end end)
bench("add", function(k) for _ = 1, k do local _ = a + b end end)
bench("method_relu", function(k) for _ = 1, k do local _ = a:relu() end end)
bench("matmul_2x2", function(k)
  local m = diloco.randn(2, 2)
  for _ = 1, k do local _ = m:matmul(m) end
end)
