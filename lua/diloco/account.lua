-- diloco.account: the account's display.  The account itself (where each island's time
-- went, every second of the run's window in one bucket; goodput; uptime) is computed in
-- C, once for sim and run (core/account.h, diloco.Account; VTime:stats().account):
--   useful       its steps' share that entered a merge (and the alpha kept of overwritten ones)
--   overwritten  trained after its last send of a fragment, replaced by that fragment's merge
--   dropped      sent and never merged, or lost to a kill
--   unsent       trained and in no contribution at the end (sync.final_flush sends it)
--   down         killed or paused, until it was back
--   waiting      blocked on a round, joining, starting, or held while another was down
--   done         finished, or ready with no further step fitting before the horizon
--   other        what no measure covers (run: before a learner's first start, time its
--                processes' own clocks miss; sim: none)
-- Shares of the window per island sum to 1; the total weighs the islands by their
-- nominal tokens per second, as goodput does.
local diloco = require "diloco"

local M = {}

-- Every bucket, in the order rows are printed (core/account.h).
M.BUCKETS = diloco.ACCOUNT_BUCKETS
M.RUN_BUCKETS = M.BUCKETS -- (its name before sim had "other" too)
local HEAD = { useful = "useful", overwritten = "overwritten", dropped = "dropped", unsent = "unsent", down = "down",
  waiting = "waiting", done = "done early", other = "other" }

-- The buckets to show for these rows: every one, but "other" only when a row has some
-- that a table shows (sim's is rounding at most; summaries of earlier versions lack it).
function M.shown(rows)
  local other = false
  for _, r in pairs(rows) do
    if type(r) == "table" and (tonumber(r.other) or 0) >= 5e-4 then other = true end
  end
  local out = {}
  for _, b in ipairs(M.BUCKETS) do
    if b ~= "other" or other then out[#out + 1] = b end
  end
  return out
end

-- The end-of-run table: one row per island and the total (none when total is nil),
-- percentages, and the merges each island's contributions joined.
function M.table_text(per, total, merged, buckets)
  if not buckets then
    local all = { total }
    for _, r in ipairs(per) do all[#all + 1] = r end
    buckets = M.shown(all)
  end
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
  if total then row("all", total, merged and sum) end
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
