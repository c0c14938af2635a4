-- Elastic data parallel on real processes (runtime.elastic = true, the default): a
-- learner that fails stops only itself; the others go on, and when it is back it takes
-- its newest checkpoint (model and optimizer) and replays the averaged gradients of the
-- steps it missed through its optimizer (core/include/diloco/learner.h, "Replay"), so
-- that it holds the very model the others hold.  A tiny GPT, 2 learner processes; kills
-- only the pids `run` started (chaos).
local H = require "spec.helpers"
local events, of_kind = H.events, H.of_kind
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"

local STEPS = sanitized and 600 or 2000

local function recipe(S, chaos, extra)
  return S.write("dp.lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = "dpel",
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 16, batch = 8 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, schedule = "cosine", min_lr = 3e-4, clip = 1.0 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "dp", fragments = 1, %s },
  islands = { count = 2 },
  runtime = { heartbeat = "0.5s", timeout = "3s", drain = "10s" },
  checkpoint = { every = %d, minutes = 0, keep = 3 },
  steps = %d,
  eval = { every = 0, batches = 4 },
  chaos = %s,
}
]], extra.sync or "", extra.every or 10, STEPS, chaos))
end

local same_model = H.same_model

-- Runs the recipe to its end (exit 0, a summary without error); returns the run's
-- events, its summary, learner 2's events and the two learners' final models.
local function run_with(S, chaos, extra)
  local path = recipe(S, chaos, extra or {})
  local out, code = H.sh(string.format("%s run %s --out %s/run --quiet 2>&1", exe, path, S.dir))
  assert.are.equal(0, code, out)
  local ev = events(S.dir .. "/run/metrics.jsonl")
  local s = ev[#ev]
  assert.are.equal("summary", s.event)
  assert.is_nil(s.error)
  assert.are.equal(0, #of_kind(ev, "fault", "job_rollback"))
  local models = {}
  for m = 1, 2 do
    local t, meta = diloco.load_safetensors(string.format("%s/run/learner-%d/model.safetensors", S.dir, m))
    assert.is_table(t, tostring(meta) .. "; learner " .. m .. ": " .. diloco.json_encode(s.per_learner[m]))
    assert.are.equal(tostring(STEPS), meta["diloco.step"])
    models[m] = t
  end
  return ev, s, events(S.dir .. "/run/learner-2/metrics.jsonl"), models
end

describe("diloco-lua run, elastic data parallel", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("brings a killed learner back from its checkpoint by replay, holding the others' model bit for bit", function()
    -- (a history of the whole run: the others' steps while it was down are all held)
    local _, s, ev2, models = run_with(S, string.format('{ { at = "%s", kill = 2, down = "1s" } }',
      sanitized and "5s" or "1.5s"), { sync = "dp_history = " .. STEPS })
    local joins = of_kind(ev2, "join")
    assert.are.equal(2, #joins, "learner 2 ran twice")
    -- its second process took its newest checkpoint, then replayed from that step on
    assert.matches("learner%-2/checkpoint%-0*%d+%.safetensors$", joins[2].restored)
    local K = joins[2].step
    assert.are.equal(0, K % 10)
    local replays = of_kind(ev2, "replay")
    assert.is_true(#replays >= 1, "no replay")
    assert.are.equal(K, replays[1].from)
    local replayed = 0
    for _, r in ipairs(replays) do replayed = replayed + r.steps end
    assert.is_true(replayed > 10, "replayed " .. replayed .. " steps") -- the others went on while it was down
    local sum2 = of_kind(ev2, "summary")
    assert.are.equal(replayed, sum2[#sum2].replayed)
    assert.are.equal(0, sum2[#sum2].unreplayed)
    -- one model: the restarted learner's equals the other's and the run's, bit for bit
    local ok, why = same_model(models[2], models[1])
    assert.is_true(ok, "learner 2's model vs learner 1's: " .. tostring(why))
    ok, why = same_model(assert(diloco.load_safetensors(S.dir .. "/run/model.safetensors")), models[1])
    assert.is_true(ok, "the run's model vs learner 1's: " .. tostring(why))
    assert.are.equal(1, s.restarts)
    assert.is_true(s.final_eval_loss < 5.4)
  end)

  it("replays from the initial model when the learner has no checkpoint, and skips (in phase events) what the "
    .. "syncer no longer holds", function()
    -- no checkpoints: the restarted learner starts from the initial model at step 0; a
    -- history of 8 averages cannot cover the steps it missed
    local _, _, ev2, models = run_with(S, string.format('{ { at = "%s", kill = 2, down = "0.5s" } }',
      sanitized and "5s" or "0.5s"), { every = 0, sync = "dp_history = 8" })
    local joins = of_kind(ev2, "join")
    assert.are.equal(2, #joins)
    assert.is_nil(joins[2].restored)
    local unreplayed = 0
    for _, p in ipairs(of_kind(ev2, "phase")) do unreplayed = unreplayed + (p.unreplayed or 0) end
    assert.is_true(unreplayed > 0, "no unreplayed steps")
    local sum2 = of_kind(ev2, "summary")
    assert.are.equal(unreplayed, sum2[#sum2].unreplayed)
    assert.is_true(sum2[#sum2].replayed >= 1)
    assert.is_false(same_model(models[2], models[1]))
  end)
end)
