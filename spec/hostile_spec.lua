-- A live syncer with learners attached, started by hand as users do, against hostile and
-- duplicate peers (issue 35): text that is not UTF-8, a second claim on a live learner's
-- id, floods of sockets from the learners' own address, connection churn.  Each attack
-- comes from outside the project's code: raw sockets of spec/hostile_peer.py (written from
-- docs/protocol.md), or a second real learner process.  Every test kills only the pids it
-- started.
local H = require "spec.helpers"
local events, of_kind = H.events, H.of_kind
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec"
local peer = "/usr/bin/python3 " .. here .. "/hostile_peer.py"

local function recipe(S, name, o)
  return H.tiny_recipe(S, name, { count = o.count, steps = 1000000,
    sync = { preset = "decoupled", H = 16, fragments = 2, tau = 1 },
    runtime = { timeout = "2s", refusals = o.refusals or "10s" } })
end

-- A syncer and `count` learners started by hand; returns the run's handle: its pids (to
-- kill at the end), the syncer's address and metrics path, and start_learner(id).
local function live_run(S, count, o)
  local path = recipe(S, "live", { count = count, refusals = o and o.refusals })
  local secret = S.write("secret", "s3cret\n")
  local run = { pids = {}, learners = {}, addr_file = S.dir .. "/address", metrics = S.dir .. "/run/metrics.jsonl",
    path = path, secret = secret }
  run.syncer = assert(diloco.proc.spawn { exe, "syncer", path, "--listen", "127.0.0.1:0", "--address-file",
    run.addr_file, "--secret-file", secret, "--out", S.dir .. "/run", "--quiet",
    stdout = S.dir .. "/syncer.log", stderr = S.dir .. "/syncer.log", parent_death = "KILL" })
  run.pids[#run.pids + 1] = run.syncer
  -- each process dies with the spec (parent_death): the runs have no end of their own
  -- (steps 10^6), and a learner whose test died (a ctest timeout) must not train on
  function run.start_learner(id, out, logname)
    local log = S.dir .. "/" .. (logname or ("l" .. id)) .. ".log"
    local pid = assert(diloco.proc.spawn { exe, "learner", path, "--connect", "@" .. run.addr_file, "--id", tostring(id),
      "--secret-file", secret, "--out", out or (S.dir .. "/l" .. id), "--overwrite", "--quiet",
      stdout = log, stderr = log, env = { OMP_NUM_THREADS = "1" }, parent_death = "KILL" })
    run.pids[#run.pids + 1] = pid
    run.learners[id] = pid
    return pid
  end
  for id = 1, count do run.start_learner(id) end
  function run.merges() return H.count_events(run.metrics, "merge") end
  function run.address() return (H.read_lines(run.addr_file)[1] or ""):match("^%s*(.-)%s*$") end
  -- waits (polling its metrics) until at least n merges, at most secs
  function run.await_merges(n, secs)
    H.await_or_kill(run.syncer, secs or 60, n .. " merges", function() return run.merges() >= n end)
  end
  function run.alive(pid) return diloco.proc.wait(pid) == nil end
  function run.stop()
    local left = {}
    for _, pid in ipairs(run.pids) do -- (a pid H.await_or_kill reaped already: pcall)
      local ok, st = pcall(diloco.proc.wait, pid)
      if ok and st == nil then
        pcall(diloco.proc.signal, pid, "TERM")
        left[#left + 1] = pid
      end
    end
    local deadline = diloco.clock() + 20
    for _, pid in ipairs(left) do
      local st = diloco.proc.wait(pid)
      while st == nil and diloco.clock() < deadline do
        diloco.proc.sleep(0.05)
        st = diloco.proc.wait(pid)
      end
      if st == nil then
        pcall(diloco.proc.signal, pid, "KILL")
        diloco.proc.wait(pid, true)
      end
    end
  end
  function run.log(name) return table.concat(H.read_lines(S.dir .. "/" .. name .. ".log"), "\n") end
  return run
end

-- Every line of the metrics file at path is a JSON object (valid UTF-8: the decoder checks).
local function all_json(path)
  local n = 0
  for i, line in ipairs(H.read_lines(path)) do
    assert(diloco.json_decode(line), string.format("%s:%d is not JSON: %s", path, i, line))
    n = i
  end
  return n
end

describe("a live syncer against hostile peers", function()
  local S, run
  before_each(function() S = H.scratch() end)
  after_each(function()
    if run then run.stop() end
    run = nil
    if os.getenv("HOSTILE_KEEP") then print("kept " .. S.dir) else S.cleanup() end
  end)

  -- Seen: one pre-auth ERROR whose text was not UTF-8 reached a fault event, the JSON
  -- writer refused it, and the syncer stopped merging 0.26 s later.
  it("serves on after an ERROR frame that is not UTF-8, sent before authentication", function()
    run = live_run(S, 2)
    run.await_merges(4)
    local out, code = H.sh(peer .. " error-utf8 " .. run.address())
    assert.are.equal(0, code, out)
    local before = run.merges()
    run.await_merges(before + 6)
    assert.is_true(run.alive(run.syncer), run.log("syncer"))
    all_json(run.metrics)
  end)

  -- Seen: a duplicate `--id 2` replaced the live learner 2's connection; the live one was
  -- told "mismatch", trained alone to the end and exited 0, and the syncer logged nothing.
  it("refuses a second learner with a live learner's id: the duplicate exits non-zero, the live one stays", function()
    run = live_run(S, 2)
    run.await_merges(4)
    local out, code = H.sh(string.format("OMP_NUM_THREADS=1 timeout 120 %s learner %s --connect @%s --id 2 "
      .. "--secret-file %s --out %s/dup --overwrite --quiet", exe, run.path, run.addr_file, run.secret, S.dir))
    assert.are_not.equal(0, code, out)
    assert.are_not.equal(124, code, "the duplicate was not refused within 120 s: " .. out)
    -- texts name learners by number, as --id and the events' learner field do: "learner 2"
    assert.matches("learner 2 is live, connected from 127.0.0.1:", out, 1, true)
    assert.matches("is refused", out, 1, true)
    -- the live learner 2 kept its connection all along, and still merges
    local before = run.merges()
    run.await_merges(before + 6)
    assert.is_true(run.alive(run.learners[2]), run.log("l2"))
    local ev = events(run.metrics)
    for _, kind in ipairs { "lost", "replaced" } do
      for _, f in ipairs(of_kind(ev, "fault", kind)) do
        assert.are_not.equal(2, f.learner, "learner 2 " .. kind .. ": " .. tostring(f.text))
      end
    end
    -- the syncer's own account of the refusal names the same learner 2
    local said
    for _, f in ipairs(of_kind(ev, "fault", "refused")) do
      if tostring(f.text):find("is live", 1, true) then said = f.text end
    end
    assert.matches("learner 2 is live, connected from 127.0.0.1:", tostring(said), 1, true)
    all_json(run.metrics)
  end)

  -- The other half of the rule: a holder that has fallen silent (paused here) gives way at
  -- once to a new incarnation, which the syncer logs; the old one, back, finds itself cut
  -- off for good and exits non-zero saying why, instead of training on alone.
  it("lets a new incarnation take over a silent learner's id; the old one, back, exits non-zero", function()
    run = live_run(S, 2)
    run.await_merges(4)
    local old = run.learners[2]
    -- the new incarnation is up and knocking (refused: the old one is live) before the old
    -- one falls silent, so the takeover does not hang on how fast a process starts (one
    -- slower than the 2 s timeout would find the old connection dropped, nothing to take over)
    local new = run.start_learner(2, S.dir .. "/l2-new", "l2-new")
    H.await_or_kill(new, 60, "the new incarnation's first refusal", function()
      for _, f in ipairs(of_kind(events(run.metrics), "fault", "refused")) do
        if tostring(f.text):find("learner 2 is live", 1, true) then return true end
      end
    end)
    assert(diloco.proc.signal(old, "STOP"))
    -- it takes over after a second of the old one's silence (half the 2 s timeout): its
    -- retries come at most a third of a second apart, one inside the second that follows
    H.await_or_kill(new, 60, "the new incarnation's takeover", function()
      return #of_kind(events(run.metrics), "fault", "replaced") >= 1
    end)
    local replaced = of_kind(events(run.metrics), "fault", "replaced")[1]
    assert.are.equal(2, replaced.learner)
    assert.matches("fell silent and gave way to a new one from 127.0.0.1:", replaced.text, 1, true)
    assert(diloco.proc.signal(old, "CONT"))
    local st
    H.await_or_kill(old, 60, "the old incarnation's exit", function()
      st = diloco.proc.wait(old)
      return st ~= nil
    end)
    assert.is_true(st.exited ~= nil and st.exited ~= 0, "the old learner 2 ended with " .. tostring(st.exited or st.name))
    local log = table.concat(H.read_lines(S.dir .. "/l2.log"), "\n")
    assert.matches("learner 2", log, 1, true)
    assert.matches("conflict", log, 1, true)
    -- the new incarnation merges on
    local before = run.merges()
    run.await_merges(before + 4)
    assert.is_true(run.alive(new))
    all_json(run.metrics)
  end)

  -- Seen: at 200 connections/s, 10,000 fault events (2 MB) were appended to metrics.jsonl
  -- in 51 s.  Refusals are counted; the metrics get the first of each reason and one
  -- summary per interval (runtime.refusals), whatever the rate.
  it("reports a churn of refused connections in bounded form", function()
    run = live_run(S, 2, { refusals = "1s" })
    run.await_merges(2)
    local size0 = #table.concat(H.read_lines(run.metrics), "\n")
    local out, code = H.sh(peer .. " churn " .. run.address() .. " 600")
    assert.are.equal(0, code, out)
    -- the refusals are counted in refusals events within an interval or two (all but
    -- the last few sockets, which the syncer may refuse in a later interval of their own,
    -- each then a refused line of its reason)
    H.await_or_kill(run.syncer, 30, "590 refusals reported", function()
      local n = 0
      for _, e in ipairs(of_kind(events(run.metrics), "refusals")) do n = n + e.count end
      return n >= 590
    end)
    local ev = events(run.metrics)
    local refused = of_kind(ev, "fault", "refused")
    assert.is_true(#refused <= 3 * #of_kind(ev, "refusals") + 3, #refused .. " refused fault lines")
    local r = of_kind(ev, "refusals")[1]
    assert.matches("by reason malformed %d+", r.text)
    assert.matches("by address 127.0.0.1 %d+", r.text)
    -- 600 refusals cost a few lines, not 600: well under 100 bytes each
    local grown = #table.concat(H.read_lines(run.metrics), "\n") - size0
    local merges = run.merges()
    assert.is_true(grown < 600 * 100 // 4 + merges * 1000, "metrics grew " .. grown .. " bytes")
    assert.is_true(run.alive(run.syncer), run.log("syncer"))
    all_json(run.metrics)
  end)
end)
