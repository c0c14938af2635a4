-- Non-elastic data parallel on real processes (runtime.elastic = false,
-- lua/diloco/cluster.lua's rollback): a failure stops the job, every learner starts
-- again from the newest checkpoint all of them hold, model and optimizer included, and
-- the steps past it are lost work.  A tiny GPT, 2 learner processes; kills only the pids
-- `run` started (chaos).
local H = require "spec.helpers"
local events, of_kind = H.events, H.of_kind
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"

local STEPS = sanitized and 600 or 2000

local function recipe(S, chaos)
  return S.write("dp.lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = "dprb",
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 16, batch = 8 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "dp", fragments = 1 },
  islands = { count = 2 },
  runtime = { heartbeat = "0.5s", timeout = "3s", drain = "10s", elastic = false },
  checkpoint = { every = 10, minutes = 0, keep = 3 },
  steps = %d,
  eval = { every = 0, batches = 4 },
  chaos = %s,
}
]], STEPS, chaos))
end

local same_model = H.same_model

-- Runs the recipe with these chaos events to its end (exit 0, a summary without error);
-- returns its events, the summary and the job_rollback faults (a begin and an end each).
local function run_with(S, chaos)
  local path = recipe(S, chaos)
  local out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
  assert.are.equal(0, code, out)
  local ev = events(S.dir .. "/run/metrics.jsonl")
  local s = ev[#ev]
  assert.are.equal("summary", s.event)
  assert.is_nil(s.error)
  local rb = of_kind(ev, "fault", "job_rollback")
  assert.are.equal(2, #rb, out)
  return ev, s, rb
end

describe("diloco-lua run, data parallel with runtime.elastic = false", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("rolls every learner back to their last common checkpoint when one is killed, and ends with one model", function()
    -- late enough for a checkpoint (every 10 steps) before it, even under the sanitizers
    -- one rollback, begun by the kill and ended at a checkpoint step
    local ev, s, rb = run_with(S, string.format('{ { at = "%s", kill = 2, down = "1s" } }', sanitized and "5s" or "2s"))
    assert.is_true(rb[1].begin and rb[1].learner == 2 and rb[1].cause == "kill")
    local K = rb[2].step
    assert.is_false(rb[2].begin)
    assert.are.equal(0, K % 10)
    assert.is_true(K > 0, "the kill came after the first checkpoint")
    assert.are.equal(1, s.job_rollbacks)
    -- every learner came back at that step, from its checkpoint of that step
    for m = 1, 2 do
      local joins = of_kind(events(string.format("%s/run/learner-%d/metrics.jsonl", S.dir, m)), "join")
      assert.are.equal(2, #joins, "learner " .. m .. " ran twice")
      assert.are.equal(0, joins[1].step)
      assert.are.equal(K, joins[2].restart_at)
      assert.are.equal(K, joins[2].step)
      assert.matches(string.format("learner%%-%d/checkpoint%%-0*%d%%.safetensors$", m, K), joins[2].restored)
      assert.are.equal("checkpoint", joins[2].optimizer)
    end
    -- the steps past K are lost work: the goodput's merged tokens are the run's steps,
    -- once each (2 learners x 8 x 16 tokens a step), not what was trained twice
    assert.are.equal(s.rolled_back_steps, rb[2].rolled_back_steps)
    assert.are.equal(s.rolled_back_steps * 2 * 128, s.rolled_back_tokens)
    assert.are.equal(STEPS * 2 * 128, s.useful_tokens)
    assert.are.equal(STEPS, of_kind(ev, "merge")[#of_kind(ev, "merge")].version)
    -- one model: both learners' final models are the same, bit for bit, and are the run's
    local saved = assert(diloco.load_safetensors(S.dir .. "/run/model.safetensors"))
    for m = 1, 2 do
      local t, meta = diloco.load_safetensors(string.format("%s/run/learner-%d/model.safetensors", S.dir, m))
      assert.is_table(t, meta)
      assert.are.equal(tostring(STEPS), meta["diloco.step"])
      local ok, why = same_model(t, saved)
      assert.is_true(ok, string.format("learner %d's model vs the run's: %s", m, why))
    end
    assert.is_true(s.final_eval_loss < 5.4)
  end)

  it("rolls back once for two failures at the same moment, restarting both together", function()
    -- both kills in one pass of the chaos executor: the second comes while the first's
    -- rollback has signalled every learner but reaped none (a learner restarted alone
    -- then kept the rollback waiting for its process for ever)
    local at = sanitized and "5s" or "2s"
    local _, s, rb = run_with(S, string.format('{ { at = "%s", kill = 1, down = "1s" }, { at = "%s", kill = 2, down = '
      .. '"2s" } }', at, at))
    assert.is_true(rb[1].begin and rb[1].learner == 1)
    assert.is_false(rb[2].begin)
    -- back once the later down time is over, both at once
    assert.is_true(rb[2].latency >= 2, tostring(rb[2].latency))
    assert.are.equal(1, s.job_rollbacks)
    for m = 1, 2 do
      local joins = of_kind(events(string.format("%s/run/learner-%d/metrics.jsonl", S.dir, m)), "join")
      assert.are.equal(2, #joins, "learner " .. m .. " ran twice")
      assert.are.equal(rb[2].step, joins[2].restart_at)
    end
    assert.are.equal(STEPS * 2 * 128, s.useful_tokens)
  end)

  it("stops on SIGTERM while every learner is down for a rollback, exiting 143", function()
    local path = recipe(S, '{ { at = "1.5s", kill = 2, down = "30s" } }')
    local out = S.dir .. "/run"
    local pid = assert(diloco.proc.spawn { exe, "run", path, "--out", out, "--quiet",
      stdout = S.dir .. "/run.out", stderr = S.dir .. "/run.err" })
    H.await_or_kill(pid, 60, "rollback", function() -- until it has begun: everyone down for 30 s
      return table.concat(H.read_lines(out .. "/metrics.jsonl"), "\n"):find('"kind":"job_rollback"', 1, true) ~= nil
    end)
    local t0 = diloco.clock()
    assert(diloco.proc.signal(pid, "TERM"))
    local st
    while not st and diloco.clock() - t0 < 20 do
      diloco.proc.sleep(0.1)
      st = diloco.proc.wait(pid)
    end
    if not st then -- it hangs: end it, and fail
      diloco.proc.signal(pid, "KILL")
      diloco.proc.wait(pid, true)
    end
    assert.is_table(st, "run did not stop within 20 s of SIGTERM (its learners down for 30 s)")
    assert.are.equal(143, st.exited, table.concat(H.read_lines(S.dir .. "/run.err"), "\n"))
    local ev = events(out .. "/metrics.jsonl")
    local s = ev[#ev]
    assert.are.equal("summary", s.event)
    assert.is_true(s.interrupted)
    for m = 1, 2 do assert.are.equal("stopped", s.per_learner[m].state) end
  end)

  it("rolls back a hung (paused) learner once the syncer has lost it, and restarts all after the pause", function()
    local ev, s, rb = run_with(S, '{ { at = "1.5s", pause = 1, down = "4s" } }')
    assert.are.equal("pause", rb[1].cause)
    local pause = of_kind(ev, "fault", "pause")[1]
    -- lost by timeout (3 s), and everyone back when the pause would have ended
    assert.is_true(rb[1].wall_s - pause.wall_s > 2,
      string.format("rollback %.2f s after the pause", rb[1].wall_s - pause.wall_s))
    assert.is_true(rb[2].wall_s - pause.wall_s >= 4 - 0.05)
    assert.are.equal(STEPS * 2 * 128, s.useful_tokens)
    local a = assert(diloco.load_safetensors(S.dir .. "/run/learner-1/model.safetensors"))
    local b = assert(diloco.load_safetensors(S.dir .. "/run/learner-2/model.safetensors"))
    local ok, why = same_model(a, b)
    assert.is_true(ok, why)
  end)
end)
