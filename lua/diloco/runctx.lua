-- diloco.runctx: what the parts of a real run share: the syncer host (lua/diloco/cluster.lua),
-- the supervisor of its learner processes (lua/diloco/supervisor.lua) and the display with
-- the account's glue (lua/diloco/runview.lua).  One run context (ctx) is theirs: its clock,
-- its metrics lines and fault events, its messages, and its islands' states in the account
-- (core/account.h).  docs/runtime.md.
local diloco = require "diloco"
local train = require "diloco.train"
local islands = require "diloco.islands"
local hook = islands.hook
local fail = train.fail
local M = {}

-- A line of the run's metrics (OUT/metrics.jsonl); a failed write ends the run.
function M.write(ctx, event, fields)
  local ok, err = ctx.metrics:write(event, fields)
  if not ok then fail("%s", err) end
end

function M.median(xs)
  if #xs == 0 then return nil end
  local c = table.move(xs, 1, #xs, 1, {})
  table.sort(c)
  local n = #c
  return n % 2 == 1 and c[(n + 1) // 2] or 0.5 * (c[n // 2] + c[n // 2 + 1])
end

-- Whether a fault event (its fields) counts in the summary's `faults`: each fault seen
-- once, at its begin (a fault's end, begin = false, and a recovery, kind joined or
-- recovered, do not count; those without begin, lost or crash, do).
function M.counts_as_fault(e)
  return e.begin ~= false and e.kind ~= "joined" and e.kind ~= "recovered"
end

-- Seconds since the run started (its own clock: a resumed syncer's counts from the run's).
function M.elapsed(ctx) return diloco.clock() - ctx.t_start end

-- Learner m's island is in `state` from now on (core/account.h: off, starting, up, down,
-- paused, held, done).
function M.island(ctx, m, state) ctx.account:enter(m, state, M.elapsed(ctx)) end

-- A message on stderr (not with --quiet); the live display starts a new block below it.
function M.say(ctx, fmt, ...)
  ctx.drawn = nil -- the live block is not redrawn over this line
  if not ctx.quiet then
    io.stderr:write(string.format(fmt, ...), "\n")
    io.stderr:flush()
  end
end

-- The run's step: the median of the learners' reported schedule steps.
function M.run_step(ctx)
  local xs = {}
  for m = 1, ctx.recipe.islands.count do
    local i = ctx.syncer:learner(m)
    if i.joined then xs[#xs + 1] = i.steps end
  end
  return math.floor(M.median(xs) or 0)
end

-- A fault event: in the metrics with its times, counted, and given to hooks.on_fault.
function M.fault(ctx, info)
  info.wall_s = M.elapsed(ctx)
  -- the time on the fault schedule's clock (the recipe's `at`; sim's virtual_s)
  if ctx.chaos_t0 then info.schedule_s = info.wall_s - ctx.chaos_t0 end
  M.write(ctx, "fault", info)
  if M.counts_as_fault(info) then ctx.faults = ctx.faults + 1 end
  if ctx.recipe.hooks.on_fault then hook("on_fault", ctx.recipe.hooks.on_fault, info) end
end

return M
