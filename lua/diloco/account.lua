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

-- The shares of one island's stats (diloco.VTime:stats().learners[m]) over the horizon.
function M.of(l, horizon)
  local sec = { useful = l.useful_s, overwritten = l.overwritten_s, dropped = l.dropped_s, unsent = l.unsent_s,
    down = l.down_s, waiting = l.waiting_s, done = l.done_s }
  local out = {}
  for _, b in ipairs(M.BUCKETS) do out[b] = horizon > 0 and (sec[b] or 0) / horizon or 0 end
  return out
end

-- Per island shares and the total (weighted by nominal tokens per second).
function M.shares(stats)
  local per, total, weight = {}, {}, 0
  for _, b in ipairs(M.BUCKETS) do total[b] = 0 end
  for m, l in ipairs(stats.learners) do
    per[m] = M.of(l, stats.horizon)
    local w = l.nominal_tps or 1
    weight = weight + w
    for _, b in ipairs(M.BUCKETS) do total[b] = total[b] + w * per[m][b] end
  end
  for _, b in ipairs(M.BUCKETS) do total[b] = weight > 0 and total[b] / weight or 0 end
  return per, total
end

-- The end-of-run table: one row per island and the total, percentages, and the merges
-- each island's contributions joined.
function M.table_text(per, total, merged)
  local head = { "island", "useful", "overwritten", "dropped", "unsent", "down", "waiting", "done early", "merges" }
  local rows = { head }
  local function row(name, s, n)
    local r = { name }
    for _, b in ipairs(M.BUCKETS) do r[#r + 1] = string.format("%.1f%%", 100 * s[b]) end
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
