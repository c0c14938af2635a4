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
    local path = H.tiny_recipe(S, "gone", { count = 1, steps = 20000 })
    local secret = S.write("secret", "s3cret\n")
    local addr, llog = S.dir .. "/addr", S.dir .. "/learner.log"
    local syncer = assert(diloco.proc.spawn { exe, "syncer", path, "--listen", "127.0.0.1:0", "--address-file", addr,
      "--secret-file", secret, "--out", S.dir .. "/run", "--quiet", stdout = S.dir .. "/syncer.log",
      stderr = S.dir .. "/syncer.log" })
    local learner = assert(diloco.proc.spawn { exe, "learner", path, "--connect", "@" .. addr, "--id", "1",
      "--secret-file", secret, "--out", S.dir .. "/l", stdout = llog, stderr = llog })
    local ok, err = pcall(wait_for_text, llog, "learner 1: connected", 60)
    diloco.proc.signal(syncer, "KILL")
    diloco.proc.wait(syncer, true)
    if not ok then
      pcall(diloco.proc.signal, learner, "KILL")
      pcall(diloco.proc.wait, learner, true)
      error(err)
    end
    local st = diloco.proc.wait(learner, true)
    local text = table.concat(H.read_lines(llog), "\n")
    assert.are.equal(3, st.exited, text)
    local since = text:match("learner 1: trained to step 20000, but the syncer at 127%.0%.0%.1:%d+ has been unreachable "
      .. "since step (%d+) %(")
    assert.is_not_nil(since, text)
    assert.matches("its last %d+ steps were never merged %(they are in its checkpoint, not in the run's model%)", text)
    local s = H.summary_of(H.events(S.dir .. "/l/metrics.jsonl"))
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
    local path = H.tiny_recipe(S, "round", { count = 2, steps = 4000,
      sync = { preset = "diloco", H = 8, fragments = 2 }, runtime = { timeout = "120s" } })
    local secret = S.write("secret", "s3cret\n")
    local addr = S.dir .. "/addr"
    local syncer = assert(diloco.proc.spawn { exe, "syncer", path, "--listen", "127.0.0.1:0", "--address-file", addr,
      "--secret-file", secret, "--out", S.dir .. "/run", "--quiet", stdout = S.dir .. "/syncer.log",
      stderr = S.dir .. "/syncer.log" })
    local pids, logs = {}, {}
    for id = 1, 2 do
      logs[id] = S.dir .. "/learner-" .. id .. ".log"
      pids[id] = assert(diloco.proc.spawn { exe, "learner", path, "--connect", "@" .. addr, "--id", tostring(id),
        "--secret-file", secret, "--out", S.dir .. "/l" .. id, stdout = logs[id], stderr = logs[id] })
    end
    local ok, err = pcall(function()
      wait_for_text(logs[2], "learner 2: connected", 60)
      wait_for_text(logs[1], "learner 1: connected", 60)
      diloco.proc.signal(pids[2], "STOP")
      wait_for_text(logs[1], "learner 1: waiting for the round's merge (a blocking preset: every learner's "
        .. "contribution), until ", 60)
    end)
    local t0 = diloco.clock()
    diloco.proc.signal(pids[1], ok and "INT" or "KILL")
    local st = diloco.proc.wait(pids[1], true)
    local took = diloco.clock() - t0
    for _, pid in ipairs { pids[2], syncer } do
      pcall(diloco.proc.signal, pid, "KILL")
      pcall(diloco.proc.signal, pid, "CONT")
      diloco.proc.wait(pid, true)
    end
    assert(ok, err)
    local text = table.concat(H.read_lines(logs[1]), "\n")
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
    local path = H.tiny_recipe(S, "drain", { count = 1, steps = 4000, runtime = { timeout = "120s", drain = "60s" } })
    local secret = S.write("secret", "s3cret\n")
    local addr, llog = S.dir .. "/addr", S.dir .. "/learner.log"
    local syncer = assert(diloco.proc.spawn { exe, "syncer", path, "--listen", "127.0.0.1:0", "--address-file", addr,
      "--secret-file", secret, "--out", S.dir .. "/run", "--quiet", stdout = S.dir .. "/syncer.log",
      stderr = S.dir .. "/syncer.log" })
    local learner = assert(diloco.proc.spawn { exe, "learner", path, "--connect", "@" .. addr, "--id", "1",
      "--secret-file", secret, "--out", S.dir .. "/l", stdout = llog, stderr = llog })
    local ok, err = pcall(function()
      wait_for_text(llog, "learner 1: connected", 60)
      diloco.proc.signal(syncer, "STOP")
      wait_for_text(llog, "learner 1: waiting for the merge of its last ", 120)
    end)
    local t0 = diloco.clock()
    diloco.proc.signal(learner, ok and "INT" or "KILL")
    local st = diloco.proc.wait(learner, true)
    local took = diloco.clock() - t0
    pcall(diloco.proc.signal, syncer, "KILL")
    pcall(diloco.proc.signal, syncer, "CONT")
    diloco.proc.wait(syncer, true)
    assert(ok, err)
    local text = table.concat(H.read_lines(llog), "\n")
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
