-- Waits that honour signals at once and say what they wait for (issue 37, items 4 and 5):
-- a learner joining a syncer that does not answer, and one waiting for a syncer's
-- address file that never comes, each say so with their deadline, and a SIGINT or
-- SIGTERM then ends them at once with 128 + its number, naming what they waited for
-- (before: up to runtime.join_timeout, 120 s, of silence with the signal ignored).  A
-- learner whose syncer is gone trains to its end and exits 3 naming why (before: 0).
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
local H = require "spec.helpers"

-- Waits (at most `limit` s) for the file at path to hold `needle`; its text.
local function wait_for_text(path, needle, limit)
  local t0 = diloco.clock()
  while diloco.clock() - t0 < limit do
    local f = io.open(path, "r")
    local text = f and f:read("a") or ""
    if f then f:close() end
    if text:find(needle, 1, true) then return text end
    diloco.proc.sleep(0.05)
  end
  local f = io.open(path, "r")
  local text = f and f:read("a") or ""
  if f then f:close() end
  error(string.format("no %q in %s within %g s; it holds:\n%s", needle, path, limit, text), 2)
end

-- A run by hand on loopback in S.dir: its syncer (pid `syncer`, started here) writing
-- S.dir/addr, and learner(id), which starts learner `id` joining through that file (its
-- log `log(id)`, its directory S.dir/lID); stop() kills (and continues, if stopped) every
-- process it started, reaping each.
local function by_hand(S, path)
  local secret, addr = S.write("secret", "s3cret\n"), S.dir .. "/addr"
  local run = { pids = {} }
  run.syncer = assert(diloco.proc.spawn { exe, "syncer", path, "--listen", "127.0.0.1:0", "--address-file", addr,
    "--secret-file", secret, "--out", S.dir .. "/run", "--quiet", stdout = S.dir .. "/syncer.log",
    stderr = S.dir .. "/syncer.log" })
  run.pids[1] = run.syncer
  function run.log(id) return string.format("%s/learner-%d.log", S.dir, id) end
  function run.learner(id)
    local pid = assert(diloco.proc.spawn { exe, "learner", path, "--connect", "@" .. addr, "--id", tostring(id),
      "--secret-file", secret, "--out", S.dir .. "/l" .. id, stdout = run.log(id), stderr = run.log(id) })
    run.pids[#run.pids + 1] = pid
    return pid
  end
  function run.stop()
    for _, pid in ipairs(run.pids) do
      if pcall(diloco.proc.signal, pid, "KILL") then
        pcall(diloco.proc.signal, pid, "CONT")
        pcall(diloco.proc.wait, pid, true)
      end
    end
  end
  return run
end

-- Sends `sig` to pid and reaps it: its status and the seconds it took to end.
local function end_with(pid, sig)
  local t0 = diloco.clock()
  diloco.proc.signal(pid, sig)
  local st = diloco.proc.wait(pid, true)
  return st, diloco.clock() - t0
end

describe("a learner's waits", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  local function learner(connect, log)
    local path = H.tiny_recipe(S, "waits", { count = 2 })
    local secret = S.write("secret", "s3cret\n")
    return assert(diloco.proc.spawn { exe, "learner", path, "--connect", connect, "--id", "1", "--secret-file",
      secret, "--out", S.dir .. "/l", stdout = log, stderr = log })
  end

  it("end at a SIGINT while joining a syncer that does not answer, exiting 130 and saying what they waited for", function()
    -- a listening socket that never answers (its I/O runs only in polls, and none
    -- comes): as a syncer stopped with SIGSTOP would be
    local net = diloco.net.new { secret = "s3cret\n", inline_io = true }
    local port = net:listen("127.0.0.1:0")
    local log = S.dir .. "/join.log"
    local pid = learner("127.0.0.1:" .. port, log)
    wait_for_text(log, "joining the syncer at 127.0.0.1:" .. port .. " (up to 120 s, runtime.join_timeout)", 60)
    local t0 = diloco.clock()
    diloco.proc.signal(pid, "INT")
    local st = diloco.proc.wait(pid, true)
    local waited = diloco.clock() - t0
    net:close()
    local text = table.concat(H.read_lines(log), "\n")
    assert.are.equal(130, st.exited, text)
    assert.matches("stopped by SIGINT while joining the syncer at 127.0.0.1:" .. port, text, 1, true)
    assert.is_true(waited < 30, string.format("it took %.1f s to stop (the join's deadline is 120 s)", waited))
  end)

  it("end at a SIGTERM while waiting for the syncer's address file, exiting 143", function()
    local log = S.dir .. "/addr.log"
    local pid = learner("@" .. S.dir .. "/never", log)
    wait_for_text(log, "waiting for the syncer's address in " .. S.dir .. "/never (up to 120 s", 60)
    local t0 = diloco.clock()
    diloco.proc.signal(pid, "TERM")
    local st = diloco.proc.wait(pid, true)
    local waited = diloco.clock() - t0
    local text = table.concat(H.read_lines(log), "\n")
    assert.are.equal(143, st.exited, text)
    assert.matches("stopped by SIGTERM while waiting for the syncer's address in", text, 1, true)
    assert.is_true(waited < 30, string.format("it took %.1f s to stop", waited))
  end)
end)

describe("a learner whose syncer is gone", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("trains to its end, then exits 3 naming since when and why its steps were never merged", function()
    local run = by_hand(S, H.tiny_recipe(S, "gone", { count = 1, steps = 20000 }))
    local learner = run.learner(1)
    local ok, err = pcall(wait_for_text, run.log(1), "learner 1: connected", 60)
    end_with(run.syncer, "KILL")
    local st = ok and diloco.proc.wait(learner, true)
    run.stop()
    assert(ok, err)
    local text = table.concat(H.read_lines(run.log(1)), "\n")
    assert.are.equal(3, st.exited, text)
    local since = text:match("learner 1: trained to step 20000, but the syncer at 127%.0%.0%.1:%d+ has been unreachable "
      .. "since step (%d+) %(")
    assert.is_not_nil(since, text)
    assert.matches("its last %d+ steps were never merged %(they are in its checkpoint, not in the run's model%)", text)
    local s = H.summary_of(H.events(S.dir .. "/l1/metrics.jsonl"))
    assert.are.equal(20000 - tonumber(since), s.undelivered_steps)
    assert.matches("has been unreachable", s.error, 1, true)
  end)
end)

describe("a learner's round in a blocking preset", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("says what it waits for and until when once it lasts, and a signal ends it at once", function()
    -- learner 2 stopped (SIGSTOP), not lost (a long timeout): learner 1's round waits for it
    local run = by_hand(S, H.tiny_recipe(S, "round", { count = 2, steps = 4000,
      sync = { preset = "diloco", H = 8, fragments = 2 }, runtime = { timeout = "120s" } }))
    local one, two = run.learner(1), run.learner(2)
    local ok, err = pcall(function()
      wait_for_text(run.log(2), "learner 2: connected", 60)
      wait_for_text(run.log(1), "learner 1: connected", 60)
      diloco.proc.signal(two, "STOP")
      wait_for_text(run.log(1), "learner 1: waiting for the round's merge (a blocking preset: every learner's "
        .. "contribution), until ", 60)
    end)
    local st, took = end_with(one, ok and "INT" or "KILL")
    run.stop()
    assert(ok, err)
    local text = table.concat(H.read_lines(run.log(1)), "\n")
    assert.matches("until %d%d:%d%d:%d%d\n", text .. "\n")
    assert.are.equal(130, st.exited, text)
    assert.is_true(took < 20, string.format("it took %.1f s to leave the round's wait", took))
  end)
end)

describe("a learner's drain at its end", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("says what it waits for and until when, and a signal ends it at once (exit 130)", function()
    -- the syncer stopped (SIGSTOP) while the learner trains on: its last contributions
    -- are never merged, and its drain would wait runtime.drain (60 s) for them
    local run = by_hand(S, H.tiny_recipe(S, "drain", { count = 1, steps = 4000,
      runtime = { timeout = "120s", drain = "60s" } }))
    local learner = run.learner(1)
    local ok, err = pcall(function()
      wait_for_text(run.log(1), "learner 1: connected", 60)
      diloco.proc.signal(run.syncer, "STOP")
      wait_for_text(run.log(1), "learner 1: waiting for the merge of its last ", 120)
    end)
    local st, took = end_with(learner, ok and "INT" or "KILL")
    run.stop()
    assert(ok, err)
    local text = table.concat(H.read_lines(run.log(1)), "\n")
    assert.matches("learner 1: waiting for the merge of its last %d+ contributions?, until %d%d:%d%d:%d%d "
      .. "%(runtime.drain = 60 s; a signal leaves at once%)", text)
    assert.are.equal(130, st.exited, text)
    assert.is_true(took < 20, string.format("it took %.1f s to leave its drain (runtime.drain = 60 s)", took))
  end)
end)

describe("a syncer's wait for its learners", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("says which learner it waits for and until when, and fails naming the one that never came", function()
    local path = H.tiny_recipe(S, "absent", { count = 1, runtime = { join_timeout = "2s" } })
    local out, code = H.sh(string.format("%s syncer %s --listen 127.0.0.1:0 --out %s/run 2>&1", exe, path, S.dir))
    assert.are.equal(1, code, out)
    assert.matches("syncer: waiting for learner 1 to join, until %d%d:%d%d:%d%d %(runtime.join_timeout = 2 s%)", out)
    assert.matches("learner 1 did not join or come back within runtime.join_timeout = 2 s: the run ended without it "
      .. "(its model is saved)", out, 1, true)
    assert.is_not_nil(diloco.file_id(S.dir .. "/run/model.safetensors"))
  end)
end)
