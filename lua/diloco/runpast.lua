-- diloco.runpast: what a real run's files say of its past, for a syncer started again
-- (--resume, or after a chaos `syncer` fault): the merges as they stand and their times,
-- the counts the summary goes on from, the fragments' versions in a checkpoint, and what
-- each learner reported to the syncers since the last resume.  Reads files; no run context.
local diloco = require "diloco"
local rc = require "diloco.runctx"
local M = {}

-- What OUT/metrics.jsonl says of the run's merges before a --resume: the seconds from
-- the run's start (Unix time `start`; nil: from the file's first event) of the merges
-- 1..`upto` as they stand (each earlier resume continued from its checkpoint's count,
-- the merges after that checkpoint were lost), the count the last syncer had reached,
-- the Unix time of the file's first event, and the merges lost at the earlier resumes.
-- Read by pattern: a merge line is long.
function M.past_merges(path, upto, start)
  local f = path and io.open(path, "r")
  if not f then return {}, upto, nil, 0 end
  local at, gm, first, lost = {}, 0, nil, 0
  for line in f:lines() do
    local t = tonumber(line:match('^{"event":"[%w_]+","time":([%d.]+)') or "")
    first = first or t
    if line:find('^{"event":"merge"') then
      gm = gm + 1
      at[gm] = t
    elseif line:find('^{"event":"resume"') then
      local from = math.tointeger(tonumber(line:match('"merges":(%d+)') or "")) or gm
      lost, gm = lost + math.max(0, gm - from), from
    end
  end
  f:close()
  start = start or first
  local times = {}
  for k = 1, math.min(upto, gm) do
    if at[k] and start then times[#times + 1] = at[k] - start end
  end
  return times, gm, first, lost
end

-- What OUT/metrics.jsonl at path counts before a --resume, for the run's summary: its
-- reject events, its fault events that count (runctx.counts_as_fault) and its syncer restarts
-- (resume events, and chaos syncer faults' ends).
function M.past_counts(path)
  local c = { rejects = 0, faults = 0, syncer_restarts = 0 }
  local f = path and io.open(path, "r")
  if not f then return c end
  for line in f:lines() do
    if line:find('^{"event":"reject"') then
      c.rejects = c.rejects + 1
    elseif line:find('^{"event":"resume"') then
      c.syncer_restarts = c.syncer_restarts + 1
    elseif line:find('^{"event":"fault"') then
      local e = diloco.json_decode(line)
      if type(e) == "table" then
        if rc.counts_as_fault(e) then c.faults = c.faults + 1 end
        if e.kind == "syncer" and e.begin == false then c.syncer_restarts = c.syncer_restarts + 1 end
      end
    end
  end
  f:close()
  return c
end

-- The fragments' versions a syncer checkpoint holds (its metadata syncer.versions, one per
-- fragment), 1-based by fragment; nil: no checkpoint (a fresh syncer: every version 0).
function M.checkpoint_versions(meta, P)
  local v = {}
  local list = type(meta) == "table" and meta["syncer.versions"]
  if list then
    for x in list:gmatch("[^,]+") do v[#v + 1] = math.tointeger(tonumber(x)) end
  end
  for p = 1, P do v[p] = v[p] or 0 end
  return v
end

-- What each learner reported to the syncer incarnations since the last resume in the metrics
-- at path: reported[m][p], the highest base version of its merged contributions of fragment
-- p (the versions a resumed syncer may move it back from, merge by merge as on_syncer_event
-- keeps them).
function M.past_reported(path)
  local f = path and io.open(path, "r")
  local reported = {}
  if not f then return reported end
  for line in f:lines() do
    if line:find('^{"event":"resume"') then
      reported = {}
    elseif line:find('^{"event":"merge"') then
      local e = diloco.json_decode(line)
      if type(e) == "table" and type(e.contributors) == "table" then
        for _, c in ipairs(e.contributors) do
          local r = reported[c.learner] or {}
          reported[c.learner] = r
          if c.base_version and e.fragment then r[e.fragment] = math.max(r[e.fragment] or -1, c.base_version) end
        end
      end
    end
  end
  f:close()
  return reported
end

return M
