-- scripts/bench/syncer_kill.lua, run by scripts/bench/syncer_kill: the syncer of a
-- 4-learner Decoupled DiLoCo run killed with kill -9 and resumed from its checkpoint,
-- side by side with the same run left alone, both started as a launcher would start them
-- (`diloco-lua syncer` and four `diloco-lua learner` processes on loopback).
--
-- The goal (issue 18): a syncer kill -9 loses no learner and at most the merges since its
-- last checkpoint.  For each kill the script counts, from the run's metrics as they stood
-- at the kill, the merges the dying syncer had made and its newest checkpoint's, so the
-- merges since that checkpoint; the resumed syncer's own count (its `resume` event's
-- merges_lost) must equal them.  A learner is lost when its process did not end with
-- status 0, or no merge after the last restart holds a contribution of it.  It prints
-- for each kill the time from the restart to the first merge and to the last learner's
-- first merged contribution, and for both runs goodput, uptime, the learners' wait share,
-- final eval loss and wall time (the killed run's over its whole window: the syncer's down
-- time is in it).
--
-- Usage: diloco-lua scripts/bench/syncer_kill.lua RECIPE STEPS KILLS DOWN EVERY OUTDIR
--   KILLS: when to kill, as fractions of the time the run left alone took to its last merge
--   ("0.3,0.6")
--   DOWN: the time between the kill and the restart (seconds, or a duration: "5s"); EVERY: runtime.syncer_every (merges)
local diloco = require "diloco"
local cluster = require "diloco.cluster"
local recipe, steps, kills_arg, every, tmp = arg[1], tonumber(arg[2]), arg[3], math.tointeger(tonumber(arg[5])), arg[6]
local down = tonumber(arg[4]) or require("diloco.recipe").parse_duration(arg[4] or "") -- (5 or "5s")
assert(recipe and steps and kills_arg and down and every and tmp,
  "usage: syncer_kill.lua RECIPE STEPS KILLS DOWN EVERY OUTDIR")
local fractions = {}
for x in kills_arg:gmatch("[^,]+") do
  local f = tonumber(x)
  assert(f and f > 0 and f < 1, "KILLS: expected fractions in (0, 1) separated by commas, got " .. kills_arg)
  fractions[#fractions + 1] = f
end
local exe = diloco.proc.self_exe()
local M = 4
local secret = tmp .. "/secret"
assert(diloco.proc.write_private(secret, "bench-syncer-kill\n"))

local function events(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = diloco.json_decode(line) end
  return out
end

local function sets()
  return { "--set", "steps=" .. steps, "--set", "islands.count=" .. M, "--set", "sync.preset=decoupled",
    "--set", "eval.every=0", "--set", "checkpoint.minutes=0", "--set", "threads=1",
    "--set", "runtime.heartbeat=0.5s", "--set", "runtime.timeout=3s", "--set", "log.every=5",
    "--set", "runtime.syncer_every=" .. every }
end

local function spawn(argv, log)
  for _, s in ipairs(sets()) do argv[#argv + 1] = s end
  argv.stdout, argv.stderr = log, log
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  return assert(diloco.proc.spawn(argv))
end

local function start_syncer(dir, listen, resume)
  local argv = { exe, "syncer", recipe, "--listen", listen, "--address-file", dir .. "/address", "--secret-file", secret,
    "--out", dir .. "/run", "--quiet" }
  if resume then argv[#argv + 1] = "--resume" end
  return spawn(argv, dir .. "/syncer.log")
end

-- One run: the syncer, four learners, the kills at `at` (seconds after the start).  On an
-- error every process it started is killed (by pid) before the error goes on.
local go_once
local function go(name, at)
  local pids = {}
  local ok, s = pcall(go_once, name, at, pids)
  if ok then return s end
  for _, pid in pairs(pids) do
    pcall(diloco.proc.signal, pid, "KILL")
    pcall(diloco.proc.wait, pid, true)
  end
  error(s, 0)
end

function go_once(name, at, pids)
  local dir = tmp .. "/" .. name
  diloco.mkdir_p(dir)
  local t0 = diloco.clock()
  local syncer = start_syncer(dir, "127.0.0.1:0")
  pids.syncer = syncer
  local learners = {}
  for m = 1, M do
    learners[m] = spawn({ exe, "learner", recipe, "--connect", "@" .. dir .. "/address", "--id", tostring(m),
      "--secret-file", secret, "--out", dir .. "/run/learner-" .. m, "--overwrite", "--quiet" },
      string.format("%s/learner-%d.log", dir, m))
    pids[m] = learners[m]
  end
  local kills = {}
  for _, t in ipairs(at) do
    while diloco.clock() - t0 < t do
      if diloco.proc.wait(syncer) then
        pids.syncer = nil
        error(name .. ": the syncer ended before the kill at " .. t .. " s", 0)
      end
      diloco.proc.sleep(0.01)
    end
    local port = assert(io.open(dir .. "/address")):read("l"):match(":(%d+)$")
    diloco.proc.signal(syncer, "KILL")
    diloco.proc.wait(syncer, true)
    pids.syncer = nil -- (reaped: its pid may be another process's now)
    -- what the run's record says at the kill: the merges it had reached, and those of the
    -- newest checkpoint on disk (each save is atomic: a write under way is not one)
    local _, reached = require("diloco.runpast").past_merges(dir .. "/run/metrics.jsonl", 0)
    local list = diloco.rundir.checkpoints(dir .. "/run/syncer")
    local k = { at = diloco.clock() - t0, reached = reached, saved = list[#list] and math.tointeger(list[#list].step) or 0 }
    diloco.proc.sleep(down)
    k.restart = diloco.clock() - t0
    syncer = start_syncer(dir, "127.0.0.1:" .. port, true)
    pids.syncer = syncer
    kills[#kills + 1] = k
  end
  local bad = {}
  for m = 1, M do
    local st = diloco.proc.wait(learners[m], true)
    if st.exited ~= 0 then bad[#bad + 1] = string.format("learner %d: %s", m, diloco.json_encode(st)) end
    pids[m] = nil
  end
  local st = diloco.proc.wait(syncer, true)
  pids.syncer = nil
  if st.exited ~= 0 then error(name .. ": the syncer failed, see " .. dir .. "/syncer.log") end
  local ev = events(dir .. "/run/metrics.jsonl")
  local s = ev[#ev]
  assert(s.event == "summary", name .. ": no summary")
  s.kills, s.bad, s.ev, s.dir = kills, bad, ev, dir
  return s
end

-- the learners' own summaries: the mean share of their loop spent waiting for the
-- network, and their reconnects (to each new syncer) in all
local function learners_said(s)
  local wait, reconnects = 0, 0
  for m = 1, M do
    local ok, lev = pcall(events, string.format("%s/run/learner-%d/metrics.jsonl", s.dir, m))
    local ls = ok and lev[#lev] or {}
    wait, reconnects = wait + (ls.wait_share or 0), reconnects + (ls.reconnects or 0)
  end
  return wait / M, reconnects
end

print(string.format("recipe %s (sync.preset = decoupled), %d learners x %d steps, one thread each; the syncer "
  .. "checkpoints every %d merges (runtime.syncer_every), killed with kill -9 at %s of the time the undisturbed "
  .. "run took to its last merge, back after %g s with --resume", recipe, M, steps, every, kills_arg, down))
local alone = go("alone", {})
-- the kills at fractions of the undisturbed run's training: up to its last merge
local last_merge = 0
for _, e in ipairs(alone.ev) do
  if e.event == "merge" then last_merge = e.wall_s end
end
local at = {}
for i, f in ipairs(fractions) do at[i] = f * last_merge end
local killed = go("killed", at)

-- each kill against what its resume said, and the recovery after it
print("\n| kill | at s | merges made | newest checkpoint's | since it (lost) | resume's merges_lost | restart s "
  .. "| first merge after, s | every learner merged again after, s |")
print("|---|---|---|---|---|---|---|---|---|")
local resumes, merges = {}, {}
for _, e in ipairs(killed.ev) do
  if e.event == "resume" then resumes[#resumes + 1] = e
  elseif e.event == "merge" then merges[#merges + 1] = e end
end
local ok_all = #resumes == #killed.kills
for i, k in ipairs(killed.kills) do
  local r = resumes[i] or {}
  local from = r.wall_s or math.huge
  local nxt = resumes[i + 1] and resumes[i + 1].wall_s or math.huge
  local first, seen, all_at = nil, {}, nil
  for _, mg in ipairs(merges) do
    if mg.wall_s > from and mg.wall_s < nxt then
      first = first or mg.wall_s
      for _, c in ipairs(mg.contributors) do
        if not seen[c.learner] then
          seen[c.learner] = true
          local n = 0
          for _ in pairs(seen) do n = n + 1 end
          if n == M then all_at = mg.wall_s end
        end
      end
    end
  end
  k.all_back = all_at ~= nil
  local lost = k.reached - k.saved
  ok_all = ok_all and r.merges_lost == lost and r.merges == k.saved
  -- (wall_s is the run's clock, from its first syncer's start: the script's own started a moment before)
  print(string.format("| %d | %.1f | %d | %d | %d | %s | %.1f | %s | %s |", i, k.at, k.reached, k.saved, lost,
    tostring(r.merges_lost), k.restart, first and string.format("+%.2f", first - from) or "none",
    all_at and string.format("+%.2f", all_at - from) or "not all"))
end

print("\n| run | goodput | uptime | learners' wait share | final eval | merges (lost) | wall s | reconnects "
  .. "| learners lost |")
print("|---|---|---|---|---|---|---|---|---|")
for _, row in ipairs { { "left alone", alone }, { "syncer killed " .. #fractions .. "x", killed } } do
  local s = row[2]
  local lost_learners = #s.bad
  for _, k in ipairs(s.kills) do if not k.all_back then lost_learners = math.max(lost_learners, 1) end end
  local wait, reconnects = learners_said(s)
  print(string.format("| %s | %.1f%% | %.1f%% | %.2f%% | %.4f | %d (%d) | %.1f | %d | %d |", row[1], 100 * s.goodput,
    100 * s.uptime, 100 * wait, s.final_eval_loss, s.merges, s.merges_lost or 0, s.wall_s, reconnects, lost_learners))
end
for _, b in ipairs(killed.bad) do print("  " .. b) end
local lost_learners = #killed.bad > 0
for _, k in ipairs(killed.kills) do lost_learners = lost_learners or not k.all_back end
print(string.format("\ngoal: no learner lost, at most the merges since the last checkpoint lost (the resume's "
  .. "count equal to the record's): %s", (ok_all and not lost_learners) and "met" or "NOT met"))
