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

-- The spread of a run's step times: the coefficient of variation of one step's compute
-- time over learners 1..M of run directory DIR whose learners logged every step
-- (log.every = 1; the first 5 steps of each left out: start-up), nil with fewer than 10
-- steps measured.  sim's islands.jitter takes it (docs/sim.md, "Step times").
function B.step_cv(dir, M)
  local xs, sum = {}, 0
  for m = 1, M do
    local ok, lev = pcall(B.events, string.format("%s/learner-%d/metrics.jsonl", dir, m))
    local prev
    for _, e in ipairs(ok and lev or {}) do
      if e.event == "step" and e.train_s then
        if prev and e.step == prev.step + 1 and e.step > 5 then
          xs[#xs + 1] = e.train_s - prev.train_s
          sum = sum + xs[#xs]
        end
        prev = e
      end
    end
  end
  if #xs < 10 then return nil end
  local mean, ss = sum / #xs, 0
  for _, x in ipairs(xs) do ss = ss + (x - mean) ^ 2 end
  return math.sqrt(ss / (#xs - 1)) / mean
end

function B.median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) // 2] or 0.5 * (xs[n // 2] + xs[n // 2 + 1])
end

return B
