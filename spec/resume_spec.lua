-- A run of several islands resumed (issue 37, item 8): `diloco-lua run` killed with
-- SIGKILL mid-run (its learners follow it: they save and leave), then `run RECIPE
-- --resume latest` continues: the syncer from its newest checkpoint, each learner from
-- its own, merges going on from the checkpoint's count to the end.  And the hints the
-- program prints about resuming work when copied.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
local H = require "spec.helpers"

local function events(path)
  local out = {}
  for _, l in ipairs(H.read_lines(path)) do out[#out + 1] = diloco.json_decode(l) end
  return out
end

local function of_kind(ev, kind)
  local out = {}
  for _, e in ipairs(ev) do if e.event == kind then out[#out + 1] = e end end
  return out
end

-- Polls (at most limit s) until ok() is true; raises with what() otherwise.
local function wait_until(ok, limit, what)
  local t0 = diloco.clock()
  while not ok() do
    if diloco.clock() - t0 > limit then error("waited " .. limit .. " s for " .. what(), 2) end
    diloco.proc.sleep(0.05)
  end
end

describe("a run of several islands", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("killed with SIGKILL resumes with --resume latest: the syncer from its checkpoint, each learner from its own",
    function()
    local path = H.tiny_recipe(S, "resume", { count = 2, steps = 3000, runtime = { syncer_every = 4 } })
    local out = S.dir .. "/run"
    local pid = assert(diloco.proc.spawn { exe, "run", path, "--out", out, "--quiet", "--set", "checkpoint.every=40",
      stdout = S.dir .. "/run1.log", stderr = S.dir .. "/run1.log" })
    local killed = false
    local ok, err = pcall(function()
      -- mid-run: the syncer has checkpointed a few times and both learners have their own
      wait_until(function()
        return #diloco.rundir.checkpoints(out .. "/syncer") >= 3 and
          #diloco.rundir.checkpoints(out .. "/learner-1") >= 1 and #diloco.rundir.checkpoints(out .. "/learner-2") >= 1
      end, 120, function() return "checkpoints in " .. out end)
      diloco.proc.signal(pid, "KILL")
      diloco.proc.wait(pid, true)
      killed = true
    end)
    if not killed then
      pcall(diloco.proc.signal, pid, "KILL")
      pcall(diloco.proc.wait, pid, true)
    end
    assert(ok, err)
    -- its learners saw it die (their supervisor's death sends them TERM): each saves and
    -- ends, which frees its directory (its lock)
    for m = 1, 2 do
      local lockfile = string.format("%s/learner-%d/.lock", out, m)
      wait_until(function()
        local lock = diloco.lock_dir(lockfile, "resume_spec")
        if lock then lock:close() end
        return lock ~= nil
      end, 60, function()
        local f = io.open(lockfile, "r")
        local holder = f and f:read("a") or ""
        if f then f:close() end
        return "learner " .. m .. "'s directory to be free: " .. holder
      end)
    end
    local before = diloco.safetensors_meta(diloco.rundir.checkpoints(out .. "/syncer")[#diloco.rundir.checkpoints(
      out .. "/syncer")].path)
    local merges_at = tonumber(before["diloco.merges"])

    -- a new run over it is refused with the hint that continues it, which works
    local text, code = H.sh(string.format("%s run %s --out %s --quiet 2>&1", exe, path, out))
    assert.are.equal(2, code, text)
    assert.matches("--resume latest continues it", text, 1, true)
    text, code = H.sh(string.format("%s run %s --out %s --quiet --resume latest 2>&1", exe, path, out))
    assert.are.equal(0, code, text)

    local ev = events(out .. "/metrics.jsonl")
    local resumes = of_kind(ev, "resume")
    assert.are.equal(1, #resumes)
    assert.are.equal(merges_at, resumes[1].merges)
    local sums = of_kind(ev, "summary")
    local s = sums[#sums]
    assert.is_nil(s.error)
    assert.is_true(s.merges > merges_at, string.format("merges %s, the checkpoint's %d", tostring(s.merges), merges_at))
    assert.is_true(s.final_eval_loss < math.log(256))
    -- each learner continued from its own checkpoint (its optimizer, data and tokens)
    for m = 1, 2 do
      local lev = events(string.format("%s/learner-%d/metrics.jsonl", out, m))
      local joins = of_kind(lev, "join")
      local last = joins[#joins]
      assert.is_string(last.restored, "learner " .. m .. " restored nothing")
      assert.are.equal("checkpoint", last.optimizer)
      assert.is_true(last.tokens > 0)
    end
  end)

  it("refuses --resume with a checkpoint path, naming what it resumes from", function()
    local path = H.tiny_recipe(S, "resume2", { count = 2 })
    local text, code = H.sh(string.format("%s run %s --out %s/run --resume %s/x.safetensors 2>&1", exe, path, S.dir,
      S.dir))
    assert.are.equal(2, code, text)
    assert.matches("a run of several islands resumes its syncer from its newest checkpoint and each learner from its "
      .. "own: --resume latest", text, 1, true)
  end)
end)
