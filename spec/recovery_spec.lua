-- Recovery of real runs (docs/runtime.md, "Recovery"): a learner whose step goes
-- non-finite rolls back to the last global model instead of poisoning the run or dying
-- (in data parallel, on a finite model, its step is void), and fails with the limit named
-- when it keeps doing so; a syncer resumed after every learner said BYE ends the run
-- instead of waiting.  Real processes over loopback, a tiny GPT; every test kills only
-- the pids it started.  The non-finite step is made by the test-only DILOCO_TEST_POISON
-- (lua/diloco/learner.lua): NaN written into a learner's real parameters at one step, or
-- (dp) its loss taken as NaN.
local H = require "spec.helpers"
local events, of_kind, summary_of = H.events, H.of_kind, H.summary_of
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"
local STEPS = sanitized and 300 or 400

local function recipe(S, name, o)
  o = o or {}
  return H.tiny_recipe(S, name, { steps = o.steps or STEPS, eval = { every = 0, batches = 4 },
    sync = o.dp and { preset = "dp", fragments = 1 } or { preset = "decoupled", H = 32, fragments = 2, tau = 1 },
    runtime = { restarts = o.restarts or 20, join_timeout = o.join_timeout or "30s" } })
end

-- Every value of every tensor in a safetensors file is finite (returns the count).
local function all_finite(path)
  local ts = assert(diloco.load_safetensors(path))
  local n = 0
  local function walk(v, name)
    if type(v) == "table" then
      for _, x in ipairs(v) do walk(x, name) end
    else
      assert.is_true(v == v and math.abs(v) ~= math.huge, name .. " holds " .. tostring(v))
      n = n + 1
    end
  end
  for name, t in pairs(ts) do walk(t:tolist(), name) end
  return n
end

describe("a learner whose step goes non-finite", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("rolls back to the last global model: the run completes, the other never waits, the model stays finite", function()
    local path = recipe(S, "poison")
    -- past the phase a learner that starts late joins at, with room for merges after it
    local at = STEPS // 2
    local out, code = H.sh(string.format("DILOCO_TEST_POISON=2:%d:1:after %s run %s --out %s/run --quiet", at, exe,
      path, S.dir))
    assert.are.equal(0, code, out)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local s = summary_of(ev)
    assert.is_nil(s.error)
    -- both reached the end; a learner that caught up with the others' rounds skipped steps
    assert.is_true(s.steps <= 2 * STEPS and s.steps >= STEPS, "steps " .. tostring(s.steps))
    -- the supervisor surfaces the learner's fault
    local rb = of_kind(ev, "fault", "rollback")
    assert.are.equal(1, #rb, out)
    assert.are.equal(2, rb[1].learner)
    assert.is_true(rb[1].step >= at and rb[1].step <= at + 16, "the first step at or past " .. at)
    assert.are.equal("parameter", rb[1].cause)
    assert.are.equal("nan", rb[1].value)
    assert.matches("parameter '[%w._]+' element %d+ is", rb[1].text)
    -- in the learner's own metrics too, and it went on to the end, no crash, no restart
    local lev = events(S.dir .. "/run/learner-2/metrics.jsonl")
    assert.are.equal(1, #of_kind(lev, "fault", "rollback"))
    local ls = summary_of(lev)
    assert.is_nil(ls.error)
    assert.are.equal(1, ls.rollbacks)
    assert.is_true(ls.schedule_step >= STEPS and ls.schedule_step <= STEPS + 16, "its schedule step " ..
      tostring(ls.schedule_step)) -- at the end, or a little past it when it caught up last
    assert.are.equal(0, s.restarts)
    assert.are.equal(0, #of_kind(ev, "fault", "crash"))
    -- it contributes again after the rollback (merges stamped after the fault)
    local after = 0
    for _, m in ipairs(of_kind(ev, "merge")) do
      for _, c in ipairs(m.contributors) do
        if c.learner == 2 and m.wall_s > rb[1].wall_s then after = after + 1 end
      end
    end
    assert.is_true(after > 0, "learner 2's contributions merged after its rollback")
    -- the other learner never waited, and the global model is finite
    assert.is_true(s.per_learner[1].idle <= 0.02, "learner 1 waited " .. tostring(s.per_learner[1].idle))
    assert.is_true(s.final_eval_loss == s.final_eval_loss and s.final_eval_loss < 10, tostring(s.final_eval_loss))
    assert.is_true(all_finite(S.dir .. "/run/model.safetensors") > 20000)
    -- the tape cannot re-execute the non-finite step: replay refuses, naming it
    local rout, rcode = H.sh(string.format("%s sim --replay %s/run", exe, S.dir))
    assert.are.equal(2, rcode, rout)
    assert.matches(string.format("learner 2 rolled back to the last global model at step %d", rb[1].step), rout, 1,
      true)
  end)

  it("fails after ROLLBACKS_MAX rollbacks in a row, naming the limit, while the run goes on", function()
    local path = recipe(S, "poison_always", { restarts = 0 })
    local at = STEPS * 3 // 4
    local out, code = H.sh(string.format("DILOCO_TEST_POISON=2:%d:99 %s run %s --out %s/run --quiet", at, exe, path,
      S.dir))
    assert.are.equal(0, code, out)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local max = require("diloco.learner").ROLLBACKS_MAX
    local rb = of_kind(ev, "fault", "rollback")
    assert.are.equal(max + 1, #rb)
    assert.is_true(rb[1].step >= at, "at or past " .. at)
    for i, f in ipairs(rb) do
      -- the failed step runs again (its schedule step moves on only by a catch-up meanwhile)
      if i > 1 then assert.is_true(f.step >= rb[i - 1].step and f.step <= rb[1].step + 16, "step " .. f.step) end
      assert.are.equal("loss", f.cause)
      assert.are.equal(i, f.in_a_row)
    end
    local crash = of_kind(ev, "fault", "crash")
    assert.are.equal(1, #crash)
    assert.matches(string.format("learner 2: %d rollbacks in a row, more than diloco.learner.ROLLBACKS_MAX = %d", max + 1,
      max), crash[1].text, 1, true)
    assert.matches("lower inner.lr", crash[1].text, 1, true)
    local s = summary_of(ev)
    assert.is_true(s.per_learner[1].steps <= STEPS and s.per_learner[1].steps >= STEPS // 2)
    local s1 = summary_of(events(S.dir .. "/run/learner-1/metrics.jsonl")).schedule_step
    assert.is_true(s1 >= STEPS and s1 <= STEPS + 16, "learner 1's schedule step " .. tostring(s1))
    assert.is_true(all_finite(S.dir .. "/run/model.safetensors") > 20000)
  end)

  it("in data parallel, on a finite model, is void: left out of that step's average, which it applies as the others do",
    function()
    local path = recipe(S, "void", { dp = true })
    local at = STEPS // 2
    local out, code = H.sh(string.format("DILOCO_TEST_POISON=2:%d:1:batch %s run %s --out %s/run --quiet", at, exe,
      path, S.dir))
    assert.are.equal(0, code, out)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local s = summary_of(ev)
    assert.is_nil(s.error)
    assert.are.equal(0, s.restarts)
    assert.are.equal(0, #of_kind(ev, "fault", "crash"))
    local rb = of_kind(ev, "fault", "rollback")
    assert.are.equal(1, #rb, out)
    assert.are.equal(2, rb[1].learner)
    assert.are.equal(at, rb[1].step)
    assert.is_true(rb[1].void)
    assert.are.equal("loss", rb[1].cause)
    assert.are.equal("nan", rb[1].loss)
    -- that step's average is learner 1's gradient alone; every other step's holds both
    for _, m in ipairs(of_kind(ev, "merge")) do
      local who = {}
      for _, c in ipairs(m.contributors) do who[#who + 1] = c.learner end
      table.sort(who) -- (listed in the order they arrived)
      assert.are.same(m.version == at and { 1 } or { 1, 2 }, who, "the merge of step " .. m.version)
    end
    -- its tokens are not useful: 2 learners x 8 x 16 tokens a step, less that step's 128
    assert.are.equal(STEPS * 2 * 128 - 128, s.useful_tokens)
    local ls = summary_of(events(S.dir .. "/run/learner-2/metrics.jsonl"))
    assert.is_nil(ls.error)
    assert.are.equal(1, ls.rollbacks)
    assert.are.equal(STEPS, ls.schedule_step)
    -- one model: both learners applied every average, that step's too
    local saved = assert(diloco.load_safetensors(S.dir .. "/run/model.safetensors"))
    for m = 1, 2 do
      local t = assert(diloco.load_safetensors(string.format("%s/run/learner-%d/model.safetensors", S.dir, m)))
      local ok, why = H.same_model(t, saved)
      assert.is_true(ok, string.format("learner %d's model vs the run's: %s", m, why))
    end
    assert.is_true(all_finite(S.dir .. "/run/model.safetensors") > 20000)
    local rout, rcode = H.sh(string.format("%s sim --replay %s/run", exe, S.dir))
    assert.are.equal(2, rcode, rout)
    assert.matches(string.format("learner 2 had a void step (its gradient left out of the average) at step %d", at),
      rout, 1, true)
  end)

  it("refuses a DILOCO_TEST_POISON of another form, naming the forms", function()
    local learner = require "diloco.learner"
    assert.are.same({ id = 2, step = 7, times = 1, when = "before" }, learner.poison_from("2:7"))
    assert.are.same({ id = 1, step = 3, times = 4, when = "after" }, learner.poison_from("1:3:4:after"))
    assert.are.same({ id = 2, step = 9, times = 1, when = "batch" }, learner.poison_from("2:9:1:batch"))
    assert.is_nil(learner.poison_from(nil))
    local ok, err = pcall(learner.poison_from, "2:x")
    assert.is_false(ok)
    assert.are.equal(2, err.code)
    assert.matches("expected ID:STEP, ID:STEP:TIMES or ID:STEP:TIMES:before|after|batch", err.diloco_error, 1, true)
    assert.is_false((pcall(learner.poison_from, "2:7:1:during")))
  end)
end)

describe("a syncer resumed after its learners finished", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("ends the run at once when every learner had said BYE, and after runtime.join_timeout when it cannot know",
    function()
    local path = recipe(S, "resumed", { steps = sanitized and 150 or 300 })
    local secret = S.write("secret", "s3cret\n")
    local addr = S.dir .. "/address"
    local pids = {}
    local function spawn(argv)
      local pid = assert(diloco.proc.spawn(argv))
      pids[#pids + 1] = pid
      return pid
    end
    local function syncer(extra)
      local argv = { exe, "syncer", path, "--listen", "127.0.0.1:0", "--address-file", addr, "--secret-file", secret,
        "--out", S.dir .. "/run", "--quiet", stdout = S.dir .. "/syncer.log", stderr = S.dir .. "/syncer.log" }
      for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
      return spawn(argv)
    end
    -- waits for pid up to secs (then kills it): its exit status, or nil if it had to be killed
    local function wait_for(pid, secs)
      local t0 = diloco.clock()
      while diloco.clock() - t0 < secs do
        local st = diloco.proc.wait(pid)
        if st then return st end
        diloco.proc.sleep(0.05)
      end
      diloco.proc.signal(pid, "KILL")
      diloco.proc.wait(pid, true)
      return nil
    end
    local log = function() return table.concat(H.read_lines(S.dir .. "/syncer.log"), "\n") end
    local ok, err = pcall(function()
      local a = syncer()
      local learners = {}
      for id = 1, 2 do
        learners[id] = spawn { exe, "learner", path, "--connect", "@" .. addr, "--id", tostring(id), "--secret-file",
          secret, "--out", S.dir .. "/l" .. id, "--overwrite", "--quiet", stdout = S.dir .. "/l" .. id .. ".log",
          stderr = S.dir .. "/l" .. id .. ".log", env = { OMP_NUM_THREADS = "1" } }
      end
      for id = 1, 2 do
        local st = wait_for(learners[id], 120)
        assert.are.equal(0, st and st.exited, "learner " .. id)
      end
      local st = wait_for(a, 60)
      assert.are.equal(0, st and st.exited, log())
      -- resumed: the checkpoint says both said BYE; it ends without waiting for anyone
      local t0 = diloco.clock()
      st = wait_for(syncer { "--resume" }, 30)
      assert.are.equal(0, st and st.exited, "the resumed syncer did not end by itself: " .. log())
      assert.is_true(diloco.clock() - t0 < 20, "it ended, but late")
      -- a checkpoint that does not say who left (an older build's, or learners that died
      -- without BYE): it waits runtime.join_timeout for them, saying so, then ends, naming
      -- them, and fails (it served without them: exit 1, the model saved)
      local list = diloco.rundir.checkpoints(S.dir .. "/run/syncer")
      local last = list[#list].path
      local ts, meta, names = diloco.load_safetensors(last)
      assert.is_string(meta["rt.bye"])
      assert.are.equal("0,1", meta["rt.bye"])
      meta["rt.bye"] = nil
      local tl = {}
      for _, n in ipairs(names) do tl[#tl + 1] = { n, ts[n] } end
      assert(diloco.save_safetensors(last, tl, meta))
      t0 = diloco.clock()
      st = wait_for(syncer { "--resume", "--set", "runtime.join_timeout=2s" }, 60)
      assert.are.equal(1, st and st.exited, "the resumed syncer did not end by itself, or not with 1: " .. log())
      assert.matches("learners 1, 2 did not join or come back within runtime.join_timeout = 2 s: the run ended "
        .. "without them (its model is saved)", log(), 1, true)
      local took = diloco.clock() - t0
      assert.is_true(took >= 2, string.format("ended after %.2f s, before the deadline", took))
      pids = {}
    end)
    for _, pid in ipairs(pids) do
      pcall(diloco.proc.signal, pid, "KILL")
      pcall(diloco.proc.wait, pid, true)
    end
    assert(ok, err)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    assert.are.equal(2, #of_kind(ev, "resume"))
    local absent = of_kind(ev, "fault", "absent")
    assert.are.equal(2, #absent)
    for i, f in ipairs(absent) do
      assert.are.equal(i, f.learner)
      assert.matches(string.format("learner %d did not join this syncer within runtime.join_timeout = 2 s", i), f.text,
        1, true)
    end
    -- three summaries (the run and two resumes), the last naming the absent learners
    local sums = of_kind(ev, "summary")
    assert.are.equal(3, #sums)
    assert.is_nil(sums[2].absent)
    assert.are.same({ 1, 2 }, sums[3].absent)
    assert.is_true(all_finite(S.dir .. "/run/model.safetensors") > 20000)
  end)
end)
