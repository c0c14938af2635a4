-- scripts/hostile/hostile.lua, run by scripts/hostile/run: a live four-learner Decoupled
-- DiLoCo run, started by hand as a launcher would (`diloco-lua syncer` and four
-- `diloco-lua learner` processes on loopback, a secret file, an address file), under
-- attack for SECONDS, then every assertion of issue 35 checked and printed as a table.
--
-- Usage: diloco-lua scripts/hostile/hostile.lua RECIPE SECONDS OUTDIR
--        HOSTILE_ATTACKS=flood,crafted,impersonate,stall,kills (the default: all; "kills"
--        alone is the control run, which every assertion must pass on any build)
--
-- The run: recipes/decoupled.lua with steps far beyond the window (the harness ends it
-- with SIGTERM), one thread per process, runtime.heartbeat 0.5 s and runtime.timeout 3 s
-- (as scripts/bench/syncer_kill), no periodic checkpoints, no evals.  Learners 1 and 2 are
-- the healthy ones: never killed by the harness.  Learners 3 and 4 are killed in turn.
--
-- Before any attack, once all four have joined:
--   calibration  learners 3 and 4 killed with kill -9 and restarted once each: the worst
--              time from a restart to the syncer's `joined` is L0, what a restart costs on
--              this build and host (the process's start-up and join) without an attack;
--   warm-up    max(10 s, 10% of SECONDS, at most 60 s), and until learners 1 and 2 have
--              each been merged 4 times (180 s at most): the longest time between two
--              merged contributions of learner 1 or 2 is the pace c, the longest time
--              between two merges g, and the syncer's RSS baseline is the median of its
--              samples in the second half.  (An ASan build trains ten times slower than
--              a Release one: the bounds on time follow the run's own pace.)
--
-- The attacks, each a process of its own started and ended by its pid
-- (scripts/hostile/attack.py, the raw-socket ones; the built diloco-lua, the impersonating
-- learners), over the window [A, A + SECONDS]:
--   flood      from A to the end: 8 unauthenticated sockets held from 127.0.0.1 (the
--              learners' address; the server's auth deadline closes them, they come back
--              at once), plus connections refused at once (an HTTP request, a wrong magic,
--              a proof before AUTH) at 10/s in the first half and 40/s in the second,
--              from 127.0.0.1 and from other 127.x addresses;
--   crafted    from A + 2% to the end, 10 connections a second (from 127.0.0.2): crafted and
--              random frames before authentication (wrong magic, version, type, reserved
--              bytes, 4 GiB lengths, msgpack bombs, ext, keys twice, frames out of order,
--              ERRORs with long, control and NUL text, truncated and random bytes) and,
--              with the secret, after it in place of the HELLO (missing keys, other
--              versions, run, model, plan, block, codecs, ids out of range, a payload);
--              from A + 85% also the frames whose text is not valid UTF-8 (a pre-auth
--              ERROR and BYE, a HELLO's run id, a HELLO's codec name claiming learner 1);
--   impersonate  from A + 15%, every max(15 s, SECONDS/8): a real `diloco-lua learner
--              --id K` (K = 1, 2, 1, ... a live healthy learner) with its own --out and the
--              secret, killed with kill -9 after 4 s (or when it exits on its own);
--   stall      from A + 10% to A + 95% (from 127.0.0.4): a holder of the secret says HELLO
--              as learner 5, an island of the recipe that no process runs (a live id
--              would be refused: impersonate tests that), then never reads again (a 4
--              KiB receive buffer) while it sends heartbeats; cut off, it comes back; and
--              16 sockets (127.0.1.x) that sent AUTH and never read the challenge;
--   kills      from A + 10%, every max(12 s, SECONDS/10) until 8 s before the end: learner 3,
--              then 4, then 3, ... killed with kill -9, restarted 2 s later (same --out).
--
-- The assertions (each printed with its measured value, its bound, PASS or FAIL; exit 1 if
-- any fails):
--   syncer alive          its process runs through the window and ends after the learners'
--                         SIGTERM (0) or its own (143); no sanitizer report in any log;
--   syncer merges         the longest time without a merge in the window <= max(10 s, 3 g);
--   not displaced (m)     for each learner: no `lost` fault at the syncer (one within 5 s after
--                         a harness kill of that learner is the kill's), its process still
--                         running at the end, and its contributions merged again and again:
--                         the longest time without a merged contribution of it, outside its
--                         kills, <= max(15 s, 3 c) (a displaced learner trains alone and is
--                         never merged again, and the syncer logs nothing at the takeover);
--   idle (m)              the healthy learners' idle share (their summaries' wait_share,
--                         written at their SIGTERM) <= 2%;
--   rejoin                each restarted learner's `joined` fault at the syncer (from
--                         127.0.0.1) within L0 + 2 s of the harness starting its new process:
--                         2 s for the admission beyond what a restart costs unattacked (the
--                         worst one is shown; each one's own `join` event beside it);
--   syncer RSS            the largest sample (VmRSS, each second) in the window <= the
--                         warm-up baseline + max(32 MiB, 25% of it);
--   metrics size          the syncer's metrics.jsonl, without its merge lines (the run's own
--                         record, which grows with training, not with attacks): at most
--                         32 KiB a minute in each half of the window, at the flood's 10/s
--                         and at its 40/s.
local diloco = require "diloco"
local recipe, SECONDS, tmp = arg[1], tonumber(arg[2]), arg[3]
assert(recipe and SECONDS and SECONDS >= 20 and tmp, "usage: hostile.lua RECIPE SECONDS(>= 20) OUTDIR")
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local attack_py = diloco.proc.realpath(here .. "/attack.py")
local exe = diloco.proc.self_exe()
local M = 4
local HEALTHY, KILLED = { 1, 2 }, { 3, 4 }
local python = io.popen("command -v python3"):read("l")
assert(python and python:sub(1, 1) == "/", "python3 not found")

-- HOSTILE_ATTACKS: the attacks to run, separated by commas (default all of them); "kills"
-- alone is the control run, which every assertion must pass on any build
local ATTACKS = {}
for a in (os.getenv("HOSTILE_ATTACKS") or "flood,crafted,impersonate,stall,kills"):gmatch("[^,%s]+") do
  assert(({ flood = 1, crafted = 1, impersonate = 1, stall = 1, kills = 1 })[a], "HOSTILE_ATTACKS: unknown attack " .. a)
  ATTACKS[a] = true
end

local run = tmp .. "/run"
local secret = tmp .. "/secret"
local address = tmp .. "/address"
assert(diloco.proc.write_private(secret, string.format("hostile-%x-%x\n", diloco.proc.pid(),
  math.floor(diloco.wall_time() * 1000))))
diloco.mkdir_p(tmp .. "/logs")

local now = diloco.wall_time -- Unix seconds: comparable with the metrics' "time"
local T0 = now()
local function log(fmt, ...)
  io.stdout:write(string.format("[%7.1f] " .. fmt .. "\n", now() - T0, ...))
  io.stdout:flush()
end

-- islands.count is M + 1: island M + 1 runs no process, its id is the stall attacker's;
-- the run starts as each learner joins (no start gate waiting for it)
local sets = { "steps=1000000", "islands.count=" .. (M + 1), "runtime.start_timeout=0", "sync.preset=decoupled", "eval.every=0", "eval.final_all=false",
  "eval.batches=2", "checkpoint.minutes=0", "threads=1", "runtime.heartbeat=0.5s", "runtime.timeout=3s", "log.every=5" }

-- ---- processes: every one the harness started, by pid ----
local procs = {} -- pid -> {name =, done = status or nil}
local function spawn(name, argv, logfile)
  argv.stdout, argv.stderr = logfile, logfile
  argv.env = { OMP_NUM_THREADS = "1", OPENBLAS_NUM_THREADS = "1" }
  argv.parent_death = "KILL" -- (the harness killed or interrupted: nothing it started lives on)
  local pid = assert(diloco.proc.spawn(argv))
  procs[pid] = { name = name }
  return pid
end
local function status(pid) -- nil while it runs, else its status (reaped once, remembered)
  local p = procs[pid]
  if not p then return nil end
  if p.done then return p.done end
  local st = diloco.proc.wait(pid)
  if st then p.done = st end
  return st
end
local function kill(pid, sig)
  if pid and procs[pid] and not status(pid) then pcall(diloco.proc.signal, pid, sig or "KILL") end
end
local function wait_for(pid, seconds)
  local t = now() + seconds
  while now() < t do
    local st = status(pid)
    if st then return st end
    diloco.proc.sleep(0.05)
  end
  return status(pid)
end
local function st_text(st)
  if not st then return "running" end
  return st.signal and ("signal " .. (st.name or st.signal)) or ("exit " .. tostring(st.exited))
end

local function with_sets(argv)
  for _, s in ipairs(sets) do
    argv[#argv + 1] = "--set"
    argv[#argv + 1] = s
  end
  return argv
end

-- ---- the run ----
local learner_pid, restarts = {}, 0
local function start_learner(m, out, tag)
  local argv = { exe, "learner", recipe, "--connect", "@" .. address, "--id", tostring(m), "--secret-file", secret,
    "--out", out, "--quiet" }
  if tag then argv[#argv + 1] = "--overwrite" end
  return spawn(tag or ("learner-" .. m), with_sets(argv), string.format("%s/logs/%s.log", tmp, tag or ("learner-" .. m)))
end

-- the syncer's metrics, read as they grow
local metrics = { pos = 0, lines = {}, bytes_other = {}, merges = {}, faults = {} }
local function read_metrics()
  local f = io.open(run .. "/metrics.jsonl", "rb")
  if not f then return end
  f:seek("set", metrics.pos)
  local chunk = f:read("a") or ""
  f:close()
  local last = chunk:match(".*()\n")
  if not last then return end
  metrics.pos = metrics.pos + last
  for line in chunk:sub(1, last):gmatch("([^\n]*)\n") do
    local ok, e = pcall(diloco.json_decode, line)
    if ok and type(e) == "table" then
      local t = tonumber(e.time) or now()
      if e.event == "merge" then
        local who = {}
        for _, c in ipairs(e.contributors or {}) do who[#who + 1] = c.learner end
        metrics.merges[#metrics.merges + 1] = { t = t, who = who }
      else
        metrics.bytes_other[#metrics.bytes_other + 1] = { t = t, n = #line + 1, event = e.event, kind = e.kind }
        if e.event == "fault" then
          metrics.faults[#metrics.faults + 1] = { t = t, kind = e.kind, learner = e.learner, text = e.text }
        end
      end
    else
      metrics.bytes_other[#metrics.bytes_other + 1] = { t = now(), n = #line + 1, event = "unreadable" }
    end
  end
end

local function read_rss(pid)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  local kb = s:match("VmRSS:%s+(%d+)%s+kB")
  return kb and tonumber(kb) * 1024
end

local function learner_events(m)
  local out = {}
  local f = io.open(string.format("%s/learner-%d/metrics.jsonl", run, m))
  if not f then return out end
  for line in f:lines() do
    local ok, e = pcall(diloco.json_decode, line)
    if ok and type(e) == "table" then out[#out + 1] = e end
  end
  f:close()
  return out
end

local R = { kills = {}, impersonations = {}, rss = {} }
local main

local function cleanup()
  for pid, p in pairs(procs) do
    if not p.done then
      pcall(diloco.proc.signal, pid, "KILL")
      pcall(diloco.proc.wait, pid, true)
    end
  end
end

function main()
  local list = {}
  for a in pairs(ATTACKS) do list[#list + 1] = a end
  table.sort(list)
  log("run in %s: the syncer and %d learners (%s), the attacks (%s) for %g s", tmp, M, recipe, table.concat(list, ","),
    SECONDS)
  local syncer = spawn("syncer", with_sets { exe, "syncer", recipe, "--listen", "127.0.0.1:0", "--address-file", address,
    "--secret-file", secret, "--out", run, "--quiet" }, tmp .. "/logs/syncer.log")
  R.syncer = syncer
  for m = 1, M do learner_pid[m] = start_learner(m, string.format("%s/learner-%d", run, m)) end

  -- the address file: host:port and the run id
  local port, run_id
  local t_wait = now() + 120
  while now() < t_wait do
    local f = io.open(address)
    if f then
      local text = f:read("a")
      f:close()
      port = text:match("^[^\n]*:(%d+)\n")
      run_id = text:match("\nrun%s+(%S+)")
      if port and run_id then break end
    end
    if status(syncer) then error("the syncer ended at its start: see " .. tmp .. "/logs/syncer.log", 0) end
    diloco.proc.sleep(0.1)
  end
  assert(port and run_id, "no address file after 120 s")
  -- the hashes an older learner's HELLO states (the stall attacker's), from the recipe
  local r = assert(require("diloco.recipe").load(recipe))
  assert(require("diloco.recipe").validate(r))
  local model = require("diloco.train").build_model(r.model, r.seed)
  local plist = model:parameters()
  local plan = require("diloco.islands").plan(r, diloco.Params(plist), #plist)
  local mh, ph, blk = plan.model_hash, plan.plan_hash, r.sync.block
  log("syncer at 127.0.0.1:%s, run %s, model hash %s, plan hash %s", port, run_id, mh, ph)

  -- all four joined: each learner's own `join` event
  t_wait = now() + 180
  local joined = 0
  while now() < t_wait and joined < M do
    joined = 0
    for m = 1, M do
      for _, e in ipairs(learner_events(m)) do
        if e.event == "join" then joined = joined + 1 break end
      end
    end
    if status(syncer) then error("the syncer ended before the learners joined: see " .. tmp .. "/logs/syncer.log", 0) end
    diloco.proc.sleep(0.2)
  end
  assert(joined == M, "the learners did not all join within 180 s: see " .. tmp .. "/logs")
  local warm = math.max(10, math.min(60, 0.1 * SECONDS))
  log("all %d learners joined", M)
  -- calibration, before any attack: learners 3 and 4 killed and restarted once each; the
  -- worst time from the restart to the syncer's `joined` is the restart's own cost (the
  -- process's start-up and join on this build and host), L0
  local function joined_since(m, t)
    for _, f in ipairs(metrics.faults) do
      if f.kind == "joined" and f.learner == m and f.t >= t - 0.05 and tostring(f.text or ""):find("from 127.0.0.1:", 1, true) then
        return f.t
      end
    end
  end
  R.L0 = 0
  for _, m in ipairs(KILLED) do
    kill(learner_pid[m], "KILL")
    wait_for(learner_pid[m], 5)
    diloco.proc.sleep(2)
    local t_restart = now()
    learner_pid[m] = start_learner(m, string.format("%s/learner-%d", run, m))
    local t_j
    local t_give_up = now() + 60
    while not t_j and now() < t_give_up do
      read_metrics()
      t_j = joined_since(m, t_restart)
      if not t_j then diloco.proc.sleep(0.05) end
    end
    assert(t_j, string.format("calibration: learner %d not back 60 s after its restart, with no attack", m))
    R.L0 = math.max(R.L0, t_j - t_restart)
    log("calibration: learner %d killed and back %.2f s after its restart", m, t_j - t_restart)
  end
  -- warm-up: at least max(10 s, 10%% of the window) and until learners 1 and 2 have each
  -- been merged 4 times (180 s at most); their longest time between two merged
  -- contributions is the run's own pace c on this build and host; the syncer's RSS
  -- baseline is the median in the warm-up's second half
  local warm = math.max(10, math.min(60, 0.1 * SECONDS))
  local t_warm = now()
  local samples = {}
  local function merged_of(m, t0)
    local ts = {}
    for _, mg in ipairs(metrics.merges) do
      if mg.t >= t0 then
        for _, w in ipairs(mg.who) do
          if w == m then ts[#ts + 1] = mg.t break end
        end
      end
    end
    return ts
  end
  while now() < t_warm + 180 do
    local rss = read_rss(syncer)
    if rss then samples[#samples + 1] = { t = now(), rss = rss } end
    read_metrics()
    local enough = now() >= t_warm + warm
    for _, m in ipairs(HEALTHY) do enough = enough and #merged_of(m, t_warm) >= 4 end
    if enough then break end
    if status(syncer) then error("the syncer ended in the warm-up: see " .. tmp .. "/logs/syncer.log", 0) end
    diloco.proc.sleep(1)
  end
  local t_warm_end = now()
  local base = {}
  for _, x in ipairs(samples) do
    if x.t >= (t_warm + t_warm_end) / 2 then base[#base + 1] = x.rss end
  end
  table.sort(base)
  R.rss_base = base[(#base + 1) // 2] or 0
  R.rss_max = R.rss_base
  R.pace, R.merge_gap_warm = 0, 0
  for _, m in ipairs(HEALTHY) do
    local prev = t_warm
    for _, t in ipairs(merged_of(m, t_warm)) do
      R.pace = math.max(R.pace, t - prev)
      prev = t
    end
    R.pace = math.max(R.pace, t_warm_end - prev)
  end
  local prev = t_warm
  for _, mg in ipairs(metrics.merges) do
    if mg.t >= t_warm then
      R.merge_gap_warm = math.max(R.merge_gap_warm, mg.t - prev)
      prev = mg.t
    end
  end
  log("warm-up %.0f s: pace c = %.1f s (learners 1 and 2: the longest time between two merged contributions), "
    .. "longest merge gap %.1f s, syncer RSS %.1f MiB, restart L0 = %.2f s", t_warm_end - t_warm, R.pace,
    R.merge_gap_warm, R.rss_base / 1048576, R.L0)

  -- ---- the window ----
  local A = now()
  local E = A + SECONDS
  R.A, R.E = A, E
  local function attacker(name, args)
    local argv = { python, attack_py }
    for _, a in ipairs(args) do argv[#argv + 1] = tostring(a) end
    log("attack: %s", name)
    return spawn(name, argv, string.format("%s/logs/%s.log", tmp, name))
  end
  local auth_args = { "--learners", M, "--secret-file", secret, "--run", run_id, "--mh", mh, "--ph", ph, "--blk", blk }
  local function join_args(...)
    local out = {}
    for _, t in ipairs { ... } do for _, x in ipairs(t) do out[#out + 1] = x end end
    return out
  end
  local plan_ev = {} -- {t =, fn =}, in time order
  local function at(t, fn) plan_ev[#plan_ev + 1] = { t = t, fn = fn } end
  local attackers = {}
  local mid = A + SECONDS / 2
  local function at_if(what, t, fn) if ATTACKS[what] then at(t, fn) end end
  at_if("flood", A, function()
    attackers[#attackers + 1] = attacker("flood-10", { "flood", "--port", port, "--until", mid, "--hold", 8, "--rate", 10 })
  end)
  at_if("flood", mid, function()
    attackers[#attackers + 1] = attacker("flood-40", { "flood", "--port", port, "--until", E, "--hold", 8, "--rate", 40 })
  end)
  at_if("crafted", A + 0.02 * SECONDS, function()
    attackers[#attackers + 1] = attacker("crafted", join_args({ "crafted", "--port", port, "--until", E, "--rate", 10,
      "--src", "127.0.0.2", "--utf8-after", A + 0.85 * SECONDS }, auth_args))
  end)
  at_if("stall", A + 0.1 * SECONDS, function()
    attackers[#attackers + 1] = attacker("stall", join_args({ "stall", "--port", port, "--until", A + 0.95 * SECONDS,
      "--src", "127.0.0.4", "--id", M + 1, "--preauth", 16 }, auth_args))
  end)
  local period = math.max(15, SECONDS / 8)
  local n_imp = 0
  for t = A + 0.15 * SECONDS, E - 5, period do
    n_imp = n_imp + 1
    local k, id = n_imp, HEALTHY[(n_imp - 1) % #HEALTHY + 1]
    at_if("impersonate", t, function()
      local tag = string.format("impersonator-%d-as-%d", k, id)
      local pid = start_learner(id, string.format("%s/imp-%d", tmp, k), tag)
      R.impersonations[#R.impersonations + 1] = { pid = pid, id = id, t = now(), tag = tag }
      log("attack: %s (a second `learner --id %d` with the secret)", tag, id)
    end)
  end
  local every = math.max(12, SECONDS / 10)
  local n_kill = 0
  for t = A + 0.1 * SECONDS, E - 8, every do
    n_kill = n_kill + 1
    local m = KILLED[(n_kill - 1) % #KILLED + 1]
    at_if("kills", t, function()
      kill(learner_pid[m], "KILL")
      wait_for(learner_pid[m], 5)
      local k = { m = m, t_kill = now() }
      R.kills[#R.kills + 1] = k
      log("kill -9 learner %d", m)
      at(now() + 2, function()
        restarts = restarts + 1
        k.t_restart = now()
        learner_pid[m] = start_learner(m, string.format("%s/learner-%d", run, m))
        log("learner %d restarted", m)
      end)
    end)
  end

  local next_rss = now()
  while now() < E do
    table.sort(plan_ev, function(a, b) return a.t < b.t end)
    while plan_ev[1] and plan_ev[1].t <= now() do
      table.remove(plan_ev, 1).fn()
    end
    if now() >= next_rss then
      next_rss = next_rss + 1
      local rss = read_rss(syncer)
      if rss then
        R.rss[#R.rss + 1] = { t = now(), rss = rss }
        if rss > R.rss_max then R.rss_max, R.rss_max_t = rss, now() end
      end
    end
    read_metrics()
    -- the impersonators: each killed 4 s after its start
    for _, imp in ipairs(R.impersonations) do
      if not imp.ended then
        local st = status(imp.pid)
        if st then
          imp.ended, imp.status = now(), st_text(st)
        elseif now() >= imp.t + 4 then
          kill(imp.pid, "KILL")
          imp.ended, imp.status = now(), "killed after 4 s"
        end
      end
    end
    -- a learner process that ends by itself in the window
    for m = 1, M do
      local st = status(learner_pid[m])
      if st and not R["ended" .. m] then
        local killed_now = false
        for _, k in ipairs(R.kills) do
          if k.m == m and not k.t_restart then killed_now = true end
        end
        if not killed_now then
          R["ended" .. m] = { t = now(), status = st_text(st) }
          log("learner %d ended by itself: %s", m, st_text(st))
        end
      end
    end
    if status(syncer) and not R.syncer_end then
      R.syncer_end = { t = now(), status = st_text(status(syncer)) }
      log("the syncer ended: %s", R.syncer_end.status)
    end
    diloco.proc.sleep(0.1)
  end
  -- anything still planned (a restart 2 s after a late kill) runs now
  table.sort(plan_ev, function(a, b) return a.t < b.t end)
  for _, ev in ipairs(plan_ev) do
    if ev.t <= E + 3 then
      while now() < ev.t do diloco.proc.sleep(0.05) end
      ev.fn()
    end
  end
  for _, pid in ipairs(attackers) do wait_for(pid, 5) end -- (each ends at its --until, printing its counts)
  for _, pid in ipairs(attackers) do kill(pid, "KILL") end
  for _, imp in ipairs(R.impersonations) do -- (one reaped may have left its pid to a newer child)
    if not imp.ended then kill(imp.pid, "KILL") end
  end
  -- a rejoin in the last seconds: give it its 2 s and more to be written
  local t_end = now() + 3
  while now() < t_end do
    read_metrics()
    diloco.proc.sleep(0.1)
  end
  R.syncer_alive_at_end = status(syncer) == nil
  if not R.syncer_alive_at_end and not R.syncer_end then
    R.syncer_end = { t = now(), status = st_text(status(syncer)) }
    log("the syncer ended: %s", R.syncer_end.status)
  end
  for m = 1, M do
    R["alive_at_end" .. m] = status(learner_pid[m]) == nil
  end
  log("the window is over: SIGTERM to the learners, then the syncer")
  for m = 1, M do kill(learner_pid[m], "TERM") end
  for m = 1, M do R["exit" .. m] = st_text(wait_for(learner_pid[m], 120)) end
  for m = 1, M do kill(learner_pid[m], "KILL") end
  local st = wait_for(syncer, 10)
  if not st then
    kill(syncer, "TERM")
    st = wait_for(syncer, 120)
  end
  R.syncer_exit = st
  kill(syncer, "KILL")
  read_metrics()
end

local ok, err = pcall(main)
cleanup()
if not ok then
  io.stderr:write("hostile.lua: ", tostring(err), "\n")
  os.exit(2)
end

-- ---- the assertions ----
local rows, failed = {}, 0
local function check(name, pass, value, bound)
  rows[#rows + 1] = { name, value, bound, pass and "PASS" or "FAIL" }
  if not pass then failed = failed + 1 end
end
local A, E = R.A, R.E

-- syncer alive
local sx = R.syncer_exit
local sx_ok = sx and (sx.exited == 0 or sx.exited == 143)
local sanitizer = {}
for _, name in ipairs(diloco.listdir(tmp .. "/logs")) do
  local f = io.open(tmp .. "/logs/" .. name)
  if f then
    local text = f:read("a")
    f:close()
    if text:find("ERROR: AddressSanitizer", 1, true) or text:find("ERROR: LeakSanitizer", 1, true)
      or text:find("runtime error:", 1, true) then
      sanitizer[#sanitizer + 1] = name
    end
  end
end
check("syncer alive through the window", R.syncer_alive_at_end and not R.syncer_end,
  R.syncer_end and string.format("ended at +%.1f s: %s", R.syncer_end.t - A, R.syncer_end.status) or "running",
  "running")
check("syncer ends on SIGTERM", sx_ok, st_text(sx), "exit 0 or 143")
check("no sanitizer report", #sanitizer == 0, #sanitizer == 0 and "none" or table.concat(sanitizer, ","), "none")

-- merges
local gap, last = 0, A
local n_window = 0
for _, mg in ipairs(metrics.merges) do
  if mg.t >= A and mg.t <= E then
    gap = math.max(gap, mg.t - last)
    last = mg.t
    n_window = n_window + 1
  end
end
gap = math.max(gap, E - last)
local gap_bound = math.max(10, 3 * R.merge_gap_warm)
check("syncer keeps merging (longest gap)", gap <= gap_bound, string.format("%.1f s, %d merges", gap, n_window),
  string.format("<= %.1f s", gap_bound))

-- displacement
local function killed_at(m, t)
  for _, k in ipairs(R.kills) do
    if k.m == m and t >= k.t_kill - 0.5 and t <= k.t_kill + 5 then return true end
  end
  return false
end
local unmerged_bound = math.max(15, 3 * R.pace)
for m = 1, M do
  local lost = {}
  for _, f in ipairs(metrics.faults) do
    if f.kind == "lost" and f.learner == m and f.t >= A and not killed_at(m, f.t) then
      lost[#lost + 1] = string.format("+%.1f", f.t - A)
    end
  end
  -- the longest time without a merged contribution of m, outside its kills (down, then
  -- until 10 s after its restart: it is sent the model and trains to its next fragment)
  local function excused(t)
    for _, k in ipairs(R.kills) do
      if k.m == m and t >= k.t_kill - 1 and t <= (k.t_restart or E) + R.L0 + 2 + unmerged_bound then return true end
    end
    return false
  end
  local worst, prev = 0, A
  local function seen(t)
    if not excused(prev) and not excused(t) then worst = math.max(worst, t - prev) end
    prev = t
  end
  for _, mg in ipairs(metrics.merges) do
    if mg.t >= A and mg.t <= E then
      for _, w in ipairs(mg.who) do
        if w == m then seen(mg.t) break end
      end
    end
  end
  seen(E)
  local ended = R["ended" .. m]
  local pass = #lost == 0 and not ended and R["alive_at_end" .. m] and worst <= unmerged_bound
  local value = string.format("lost %s; process %s; unmerged for %.1f s", #lost == 0 and "never" or table.concat(lost, " "),
    ended and ("ended at +" .. string.format("%.1f", ended.t - A) .. " (" .. ended.status .. ")") or "ran to the end", worst)
  check(string.format("learner %d not displaced", m), pass, value,
    string.format("no lost, ran, unmerged <= %.1f s", unmerged_bound))
end

-- idle share of the healthy learners
for _, m in ipairs(HEALTHY) do
  local ev = learner_events(m)
  local s = ev[#ev]
  local share = s and s.event == "summary" and tonumber(s.wait_share) or nil
  check(string.format("learner %d idle share", m), share and share <= 0.02,
    share and string.format("%.2f%% (%s)", 100 * share, R["exit" .. m]) or ("no summary (" .. tostring(R["exit" .. m]) .. ")"),
    "<= 2%")
end

-- rejoins: the syncer's `joined` fault for the learner from 127.0.0.1 (the learners'
-- address), the first one after the harness started its new process: a `joined` from
-- another address is another holder of the secret taking the free id meanwhile (the
-- crafted attacker's, from 127.0.0.2; the impersonators claim only learners 1 and 2);
-- beside it the restarted process's own `join` event (it holds the whole model then)
local worst_rejoin, rejoins, missing = 0, {}, 0
local joins = {}
for _, m in ipairs(KILLED) do joins[m] = learner_events(m) end
for _, k in ipairs(R.kills) do
  local lat, own
  if k.t_restart then
    for _, f in ipairs(metrics.faults) do
      if f.kind == "joined" and f.learner == k.m and f.t >= k.t_restart - 0.05
        and tostring(f.text or ""):find("from 127.0.0.1:", 1, true) then
        lat = f.t - k.t_restart
        break
      end
    end
    for _, e in ipairs(joins[k.m]) do
      if e.event == "join" and tonumber(e.time) and e.time >= k.t_restart - 0.05 then
        own = e.time - k.t_restart
        break
      end
    end
  end
  local own_text = own and string.format(" (own join %.2f)", own) or ""
  if lat then
    worst_rejoin = math.max(worst_rejoin, lat)
    rejoins[#rejoins + 1] = string.format("%d:%.2f%s", k.m, lat, own_text)
  else
    missing = missing + 1
    rejoins[#rejoins + 1] = string.format("%d:never%s", k.m, own_text)
  end
end
local rejoin_bound = R.L0 + 2
check("restarted learner back (worst)", (#R.kills > 0 or not ATTACKS.kills) and missing == 0 and worst_rejoin <= rejoin_bound,
  string.format("%s s over %d restarts (%s)", missing > 0 and "never" or string.format("%.2f", worst_rejoin), #R.kills,
    table.concat(rejoins, " ")), string.format("<= L0 %.2f + 2 s", R.L0))

-- RSS
local mib = 1024 * 1024
local bound = R.rss_base + math.max(32 * mib, 0.25 * R.rss_base)
check("syncer RSS (max in the window)", R.rss_max <= bound,
  string.format("%.1f MiB at +%.0f s (baseline %.1f MiB, at the end %.1f MiB)", R.rss_max / mib, (R.rss_max_t or A) - A,
    R.rss_base / mib, (R.rss[#R.rss] or { rss = 0 }).rss / mib),
  string.format("<= %.1f MiB", bound / mib))

-- metrics size, per half of the window
local mid = A + SECONDS / 2
for _, half in ipairs { { "first half (flood 10/s)", A, mid }, { "second half (flood 40/s)", mid, E } } do
  local bytes, kinds = 0, {}
  for _, b in ipairs(metrics.bytes_other) do
    if b.t >= half[2] and b.t < half[3] then
      bytes = bytes + b.n
      local key = b.kind or b.event or "?"
      kinds[key] = (kinds[key] or 0) + 1
    end
  end
  local per_min = bytes / ((half[3] - half[2]) / 60)
  local parts = {}
  for k, n in pairs(kinds) do parts[#parts + 1] = k .. " " .. n end
  table.sort(parts)
  check("metrics.jsonl growth, " .. half[1], per_min <= 32 * 1024,
    string.format("%.1f KiB/min (%s)", per_min / 1024, table.concat(parts, ", ")), "<= 32 KiB/min")
end

-- the stall attacker (a holder of the secret that reads nothing) is cut off each time:
-- it was welcomed, cut, and no connection of its lived past 3 timeouts (3 s each)
if ATTACKS.stall then
  local f = io.open(tmp .. "/logs/stall.log")
  local text = f and f:read("a") or ""
  if f then f:close() end
  local ready = tonumber(text:match("'ready': (%d+)") or "")
  local cut = tonumber(text:match("'cut': (%d+)") or "")
  local lived = tonumber(text:match("'lived_max': ([%d.]+)") or "")
  check("a peer that reads nothing is cut off", ready and ready >= 1 and cut and cut >= 1 and lived and lived <= 9,
    ready and string.format("welcomed %d, cut %d, longest lived %.1f s", ready, cut or -1, lived or -1)
      or "no stall.log summary", "welcomed and cut, each within 9 s")
end

-- what the attackers and impersonators did
print()
for _, name in ipairs(diloco.listdir(tmp .. "/logs")) do
  if name:match("^flood") or name:match("^crafted") or name:match("^stall") then
    local f = io.open(tmp .. "/logs/" .. name)
    local text = f and f:read("a") or ""
    if f then f:close() end
    print(string.format("%s: %s", name, (text:match("[^\n]*$") ~= "" and text:match("[^\n]*$")) or text:match("([^\n]*)\n?$") or ""))
  end
end
for _, imp in ipairs(R.impersonations) do
  print(string.format("%s at +%.1f s: %s", imp.tag, imp.t - A, imp.status or "?"))
end
if R.syncer_end then -- why: the last lines of its log
  local f = io.open(tmp .. "/logs/syncer.log")
  local lines = {}
  if f then
    for line in f:lines() do
      if not line:match('^{"event":"summary"') then lines[#lines + 1] = line end
    end
    f:close()
  end
  print("the syncer's log ends:")
  for i = math.max(1, #lines - 2), #lines do print("  " .. lines[i]:sub(1, 300)) end
end
local syncer_ev = 0
for _ in ipairs(metrics.bytes_other) do syncer_ev = syncer_ev + 1 end
local f = io.open(run .. "/metrics.jsonl")
local size = f and f:seek("end") or 0
if f then f:close() end
print(string.format("syncer metrics.jsonl: %d bytes, %d merge lines, %d other lines", size, #metrics.merges, syncer_ev))

print(string.format("\n| assertion | measured | bound | result |"))
print("|---|---|---|---|")
for _, r in ipairs(rows) do print(string.format("| %s | %s | %s | %s |", r[1], r[2], r[3], r[4])) end
print(string.format("\n%d of %d assertions hold%s", #rows - failed, #rows, failed > 0 and ": FAIL" or ": PASS"))
os.exit(failed > 0 and 1 or 0)
