-- scripts/bench/common.lua: what the benchmark scripts that read run directories share.
--   local bench = dofile(arg[0]:match("^(.*)/[^/]*$") .. "/common.lua")
local diloco = require "diloco"
local B = {}

-- The events of a metrics file, in order.
function B.events(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = diloco.json_decode(line) end
  return out
end

-- Steady-state tokens/s of a metrics file's step events: the tokens between the first and
-- the last step event over the wall time between them (no start-up, no final save).
function B.rate(path)
  local first, last
  for _, e in ipairs(B.events(path)) do
    if e.event == "step" then
      first = first or e
      last = e
    end
  end
  return (last.tokens - first.tokens) / (last.wall_s - first.wall_s)
end

function B.median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) // 2] or 0.5 * (xs[n // 2] + xs[n // 2 + 1])
end

return B
