-- scripts/bench/standby_kill.lua, run by scripts/bench/standby_kill: a 4-learner Decoupled
-- DiLoCo run whose syncer is two shards, each with a standby (docs/shards.md, "Standbys"),
-- side by side with the same run whose current primary of a shard (each shard in turn) is
-- killed with kill -9 every EVERY seconds.  The killed process is started again at once,
-- on its address, as the standby of the one that took its place, so each shard has a
-- standby again for the next kill.  All started as a launcher would (`diloco-lua syncer
-- --shard I/2 [--standby-of]` and four `diloco-lua learner --connect @A|@A2,@B|@B2`).
--
-- The goal (issue 38): goodput within 2 points of the run without syncer faults, and no
-- completed merge lost.  Goodput here is the useful tokens of the run's merges (each
-- merge's useful_tokens, counted once whichever process recorded it: a standby's record
-- holds its primary's merges as `replica` merges) over the tokens the learners computed
-- (their summaries' `tokens`): the share of the computed tokens that reached the global
-- model.  (In these runs no learner waits, so it is the run account's goodput, whose
-- capacity is the learners' nominal tokens per second over the window.)  A merge is lost
-- when a version of a fragment is missing from the record of the process that ended
-- serving its shard.
--
-- Usage: diloco-lua scripts/bench/standby_kill.lua RECIPE STEPS EVERY LEASE OUTDIR
local diloco = require "diloco"
local recipe, steps, every, lease, tmp = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5]
assert(recipe and steps and every and lease and tmp, "usage: standby_kill.lua RECIPE STEPS EVERY LEASE OUTDIR")
local exe = diloco.proc.self_exe()
local M, S = 4, 2
local secret = tmp .. "/secret"
assert(diloco.proc.write_private(secret, "bench-standby-kill\n"))

local function events(path)
  local out = {}
  local f = io.open(path, "r")
  if not f then return out end
  for line in f:lines() do
    local ok, e = pcall(diloco.json_decode, line)
    if ok then out[#out + 1] = e end
  end
  f:close()
  return out
end

local function sets()
  return { "--set", "steps=" .. steps, "--set", "islands.count=" .. M, "--set", "islands.syncers=" .. S,
    "--set", "sync.preset=decoupled", "--set", "eval.every=0", "--set", "checkpoint.minutes=0", "--set", "threads=1",
    "--set", "runtime.heartbeat=0.5s", "--set", "runtime.timeout=3s", "--set", "log.every=5" }
end

local function spawn(argv, log)
  for _, s in ipairs(sets()) do argv[#argv + 1] = s end
  argv.stdout, argv.stderr = log, log
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  return assert(diloco.proc.spawn(argv))
end

-- A shard's two slots, "a" and "b", each a process on a fixed address with its own
-- address file; `primary_of`: the slot whose address file a standby follows (nil: a primary).
local function start(dir, k, slot, listen, primary_of, gen)
  local argv = { exe, "syncer", recipe, "--shard", k .. "/" .. S, "--listen", listen, "--address-file",
    string.format("%s/addr%d%s", dir, k, slot), "--secret-file", secret, "--out", dir .. "/run", "--quiet" }
  if primary_of then
    for _, a in ipairs { "--standby-of", string.format("@%s/addr%d%s", dir, k, primary_of), "--lease", tostring(lease) } do
      argv[#argv + 1] = a
    end
  end
  return spawn(argv, string.format("%s/shard%d%s-%d.log", dir, k, slot, gen))
end

local function address(path)
  for _ = 1, 600 do
    local f = io.open(path, "r")
    if f then
      local a = (f:read("l") or ""):match("^%s*(%S+:%d+)%s*$")
      f:close()
      if a then return a end
    end
    diloco.proc.sleep(0.05)
  end
  error("no address in " .. path)
end

local go_once
local function go(name, kill_every)
  local pids = {}
  local ok, s = pcall(go_once, name, kill_every, pids)
  if ok then return s end
  for _, pid in pairs(pids) do
    pcall(diloco.proc.signal, pid, "KILL")
    pcall(diloco.proc.wait, pid, true)
  end
  error(s, 0)
end

function go_once(name, kill_every, pids)
  local dir = tmp .. "/" .. name
  diloco.mkdir_p(dir)
  local t0 = diloco.clock()
  -- each shard: its primary in slot a, its standby in slot b (both on fixed ports once bound)
  local listen, primary, gen = {}, {}, 0
  for k = 1, S do
    pids[k .. "a"] = start(dir, k, "a", "127.0.0.1:0", nil, gen)
    listen[k .. "a"] = address(string.format("%s/addr%da", dir, k))
    pids[k .. "b"] = start(dir, k, "b", "127.0.0.1:0", "a", gen)
    listen[k .. "b"] = address(string.format("%s/addr%db", dir, k))
    primary[k] = "a"
  end
  local connect = {}
  for k = 1, S do connect[k] = string.format("@%s/addr%da|@%s/addr%db", dir, k, dir, k) end
  local learners = {}
  for m = 1, M do
    learners[m] = spawn({ exe, "learner", recipe, "--connect", table.concat(connect, ","), "--id", tostring(m),
      "--secret-file", secret, "--out", dir .. "/run/learner-" .. m, "--overwrite", "--quiet" },
      string.format("%s/learner-%d.log", dir, m))
    pids[m] = learners[m]
  end
  local kills, next_kill, k = {}, kill_every, 1
  local done = {}
  while true do
    local all = true
    for m = 1, M do
      if not done[m] then
        local st = diloco.proc.wait(learners[m])
        if st then done[m], pids[m] = st, nil else all = false end
      end
    end
    if all then break end
    if next_kill and diloco.clock() - t0 >= next_kill then
      -- the shard's primary killed; its standby takes over; the killed one comes back, on
      -- its address, as the standby of the new primary
      local slot = primary[k]
      local other = slot == "a" and "b" or "a"
      diloco.proc.signal(pids[k .. slot], "KILL")
      diloco.proc.wait(pids[k .. slot], true)
      kills[#kills + 1] = { at = diloco.clock() - t0, shard = k, slot = slot }
      gen = gen + 1
      os.remove(string.format("%s/addr%d%s", dir, k, slot))
      pids[k .. slot] = start(dir, k, slot, listen[k .. slot], other, gen)
      primary[k] = other
      k = k % S + 1
      next_kill = next_kill + kill_every
    end
    diloco.proc.sleep(0.05)
  end
  local t_end = diloco.clock() - t0
  local bad = {}
  for m = 1, M do
    if done[m].exited ~= 0 then bad[#bad + 1] = string.format("learner %d: %s", m, diloco.json_encode(done[m])) end
  end
  for key, pid in pairs(pids) do -- the shards' processes end with their learners (a standby with its primary)
    local st = diloco.proc.wait(pid, true)
    if st.exited ~= 0 then bad[#bad + 1] = string.format("syncer %s: %s", key, diloco.json_encode(st)) end
  end
  -- the merges: every process's record (a primary's own, a standby's replicas and own),
  -- each (shard, fragment, version) once; a merge is lost when a version of a fragment is
  -- on no record (1 to the highest), or missing from the record of the process that
  -- ended serving the shard after the first version it holds
  local seen, useful, merges, lost, final_loss = {}, 0, 0, 0, nil
  for k2 = 1, S do
    local base = string.format("%s/run/shard-%d", dir, k2)
    local dirs = { base }
    for n = 1, 16 do dirs[#dirs + 1] = base .. "-standby" .. (n > 1 and tostring(n) or "") end
    local top, ended_by = {}, nil
    for _, d in ipairs(dirs) do
      local ev = events(d .. "/metrics.jsonl")
      local last = ev[#ev]
      for _, e in ipairs(ev) do
        if e.event == "merge" then
          local key = string.format("%d:%d:%d", k2, e.fragment, e.version)
          top[e.fragment] = math.max(top[e.fragment] or 0, e.version)
          if not seen[key] then
            seen[key] = true
            merges = merges + 1
            useful = useful + (e.useful_tokens or 0)
          end
        end
      end
      if last and last.event == "summary" and (last.took_over_s or not last.standby_of) and not ended_by then
        ended_by = ev
        if k2 == 1 then final_loss = last.final_eval_loss end -- (shard 1's: the assembled model's)
      end
    end
    for f, v in pairs(top) do
      for u = 1, v do
        if not seen[string.format("%d:%d:%d", k2, f, u)] then lost = lost + 1 end
      end
    end
    local prev = {}
    for _, e in ipairs(ended_by or {}) do
      if e.event == "merge" then
        if prev[e.fragment] and e.version ~= prev[e.fragment] + 1 then lost = lost + 1 end
        prev[e.fragment] = e.version
      end
    end
    if not ended_by then bad[#bad + 1] = "shard " .. k2 .. ": no process ended serving it" end
  end
  local tokens = 0
  for m = 1, M do
    local lev = events(string.format("%s/run/learner-%d/metrics.jsonl", dir, m))
    local ls = lev[#lev] or {}
    tokens = tokens + (ls.tokens or 0)
  end
  return { name = name, kills = kills, bad = bad, useful = useful, tokens = tokens, merges = merges, lost = lost,
    goodput = tokens > 0 and useful / tokens or 0, wall_s = t_end, final_loss = final_loss }
end

print(string.format("recipe %s (sync.preset = decoupled), %d learners x %d steps, one thread each; the syncer in %d "
  .. "shards, each with a standby (lease %g s); the killed run: a shard's primary killed with kill -9 every %g s, "
  .. "the shards in turn, started again at once as the standby of the one that took over", recipe, M, steps, S, lease,
  every))
local alone = go("alone", nil)
local killed = go("killed", every)
print("\n| run | goodput (useful / computed tokens) | merges | merges lost | primaries killed | final eval | wall s "
  .. "| failures |")
print("|---|---|---|---|---|---|---|---|")
for _, s in ipairs { alone, killed } do
  print(string.format("| %s | %.1f%% | %d | %d | %d | %s | %.1f | %d |", s.name == "alone" and "no syncer fault" or
    string.format("a primary killed every %g s", every), 100 * s.goodput, s.merges, s.lost, #s.kills,
    type(s.final_loss) == "number" and string.format("%.4f", s.final_loss) or "-", s.wall_s, #s.bad))
end
for _, s in ipairs { alone, killed } do
  for _, b in ipairs(s.bad) do print("  " .. s.name .. ": " .. b) end
end
local points = 100 * (alone.goodput - killed.goodput)
print(string.format("\ngoal: goodput within 2 points of the run without syncer faults (%.1f points), no merge lost: %s",
  points, (points <= 2 and killed.lost == 0 and #killed.bad == 0 and #killed.kills > 0) and "met" or "NOT met"))
