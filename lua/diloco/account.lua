-- diloco.account: where each island's time went, as `sim` reports it (the account of
-- core/include/diloco/vtime.h and learner.h): every second of the horizon in one bucket,
--   useful       its steps' share that entered a merge (and the alpha kept of overwritten ones)
--   overwritten  trained after its last send of a fragment, replaced by that fragment's merge
--   dropped      sent and never merged, or lost to a kill
--   unsent       trained and in no contribution at the end (sync.final_flush sends it)
--   down         killed, until it was back
--   waiting      blocked on a round, or joining and receiving the model
--   done         ready, with no further step fitting before the horizon
-- Shares of the horizon per island sum to 1; the total weighs the islands by their
-- nominal tokens per second, as goodput does.
local M = {}

M.BUCKETS = { "useful", "overwritten", "dropped", "unsent", "down", "waiting", "done" }
-- `run` adds other: the run's own start and end, and what its learners' metrics do not see
M.RUN_BUCKETS = { "useful", "overwritten", "dropped", "unsent", "down", "waiting", "done", "other" }
local HEAD = { useful = "useful", overwritten = "overwritten", dropped = "dropped", unsent = "unsent", down = "down",
  waiting = "waiting", done = "done early", other = "other" }

-- The shares of one island's stats (diloco.VTime:stats().learners[m]) over the horizon.
function M.of(l, horizon)
  local sec = { useful = l.useful_s, overwritten = l.overwritten_s, dropped = l.dropped_s, unsent = l.unsent_s,
    down = l.down_s, waiting = l.waiting_s, done = l.done_s }
  local out = {}
  for _, b in ipairs(M.BUCKETS) do out[b] = horizon > 0 and (sec[b] or 0) / horizon or 0 end
  return out
end

-- The total of per island shares, weighted (weights[m], default 1).
function M.total(per, weights, buckets)
  buckets = buckets or M.BUCKETS
  local total, weight = {}, 0
  for _, b in ipairs(buckets) do total[b] = 0 end
  for m, s in ipairs(per) do
    local w = weights and weights[m] or 1
    weight = weight + w
    for _, b in ipairs(buckets) do total[b] = total[b] + w * (s[b] or 0) end
  end
  for _, b in ipairs(buckets) do total[b] = weight > 0 and total[b] / weight or 0 end
  return total
end

-- Per island shares and the total (weighted by nominal tokens per second).
function M.shares(stats)
  local per, weights = {}, {}
  for m, l in ipairs(stats.learners) do
    per[m] = M.of(l, stats.horizon)
    weights[m] = l.nominal_tps or 1
  end
  return per, M.total(per, weights)
end

-- `run`: learner m's shares of the training window W (the learners' start to the last
-- one's end: what goodput's capacity is measured over) from what the supervisor measured
-- (seconds: train_s, wait_s, startup_s, down_s, paused_s, held_s, after_done_s, over all
-- its processes; overwritten_s, kept_s, unsent_s from the accounts of the processes that
-- ended with a summary) and the syncer's merged_steps over its steps: its compute splits
-- into useful (merged steps at its mean step time, and the alpha kept), overwritten,
-- unsent and dropped (the rest of its compute: sent and never merged, and the work of
-- killed processes); a paused learner counts as down, held (stopped while another was
-- down) and start-up as waiting; other is what no measure covers.
function M.of_run(x, W)
  local train = x.train_s or 0
  local step_s = (x.steps or 0) > 0 and train / x.steps or 0
  local useful = (x.merged_steps or 0) * step_s + (x.kept_s or 0)
  local over, unsent = x.overwritten_s or 0, x.unsent_s or 0
  local known = useful + over + unsent
  if known > train and known > 0 then -- (rounding, or steps of unequal length) the compute is what ran
    local k = train / known
    useful, over, unsent = useful * k, over * k, unsent * k
  end
  local sec = { useful = useful, overwritten = over, unsent = unsent,
    dropped = math.max(0, train - useful - over - unsent), down = (x.down_s or 0) + (x.paused_s or 0),
    waiting = (x.wait_s or 0) + (x.startup_s or 0) + (x.held_s or 0), done = x.after_done_s or 0 }
  local used = 0
  for _, b in ipairs(M.BUCKETS) do used = used + sec[b] end
  sec.other = math.max(0, W - used)
  local out = {}
  for _, b in ipairs(M.RUN_BUCKETS) do out[b] = W > 0 and sec[b] / W or 0 end
  return out
end

-- The end-of-run table: one row per island and the total, percentages, and the merges
-- each island's contributions joined.
function M.table_text(per, total, merged, buckets)
  buckets = buckets or M.BUCKETS
  local head = { "island" }
  for _, b in ipairs(buckets) do head[#head + 1] = HEAD[b] end
  head[#head + 1] = "merges"
  local rows = { head }
  local function row(name, s, n)
    local r = { name }
    for _, b in ipairs(buckets) do r[#r + 1] = string.format("%.1f%%", 100 * (s[b] or 0)) end
    r[#r + 1] = n and tostring(n) or ""
    rows[#rows + 1] = r
  end
  local sum = 0
  for m, s in ipairs(per) do
    row(tostring(m), s, merged and merged[m])
    sum = sum + (merged and merged[m] or 0)
  end
  row("all", total, merged and sum)
  local width = {}
  for _, r in ipairs(rows) do
    for i, c in ipairs(r) do width[i] = math.max(width[i] or 0, #c) end
  end
  local lines = {}
  for _, r in ipairs(rows) do
    local cells = {}
    for i, c in ipairs(r) do cells[i] = i == 1 and string.format("%-" .. width[i] .. "s", c) or
      string.format("%" .. width[i] .. "s", c) end
    lines[#lines + 1] = table.concat(cells, "  ")
  end
  return table.concat(lines, "\n")
end

return M
