-- diloco.Chaos (lua/lchaos.c over core/chaos.h, docs/chaos.md) seen from Lua: 1-based
-- learners and faults both ways, the timeline, merging, seeded draws that repeat, errors
-- that name the field, and the lifetime of the box.
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

describe("diloco.Chaos", function()
  it("keeps faults in time order with 1-based learners; the syncer has none", function()
    local ch = diloco.Chaos(4)
    ch:add { at = 30, kind = "kill", learner = 4, duration = 60 }
    ch:add { at = 10, kind = "slow", learner = 1, duration = 100, factor = 2 }
    ch:add { at = 50, kind = "syncer", duration = math.huge }
    assert.are.equal(3, ch:count())
    assert.are.equal(3, #ch)
    assert.are.same({ at = 10, kind = "slow", learner = 1, duration = 100, factor = 2 }, ch:get(1))
    assert.are.same({ at = 30, kind = "kill", learner = 4, duration = 60 }, ch:get(2))
    assert.are.same({ at = 50, kind = "syncer", duration = math.huge }, ch:get(3))
    -- begins and finite ends, by time; the syncer outage never ends
    local tl = ch:timeline()
    local seen = {}
    for _, e in ipairs(tl) do seen[#seen + 1] = { e.t, e.fault, e.begin } end
    assert.are.same({ { 10, 1, true }, { 30, 2, true }, { 50, 3, true }, { 90, 2, false }, { 110, 1, false } }, seen)
    assert.are.equal(60 / 1000, ch:down_share(4, 1000))
    assert.are.equal(0, ch:down_share(1, 1000))
    assert.matches("Chaos%(4 learners, 3 faults%)", tostring(ch))
  end)

  it("merges overlapping kills of one learner into one outage", function()
    local ch = diloco.Chaos(2)
    ch:add { at = 10, kind = "kill", learner = 1, duration = 10 }
    ch:add { at = 18, kind = "kill", learner = 1, duration = 7 }
    ch:add { at = 12, kind = "kill", learner = 2, duration = 1 }
    assert.are.equal(2, ch:count())
    assert.are.same({ at = 10, kind = "kill", learner = 1, duration = 15 }, ch:get(1))
  end)

  it("draws the same schedule from the same seed, another from another", function()
    local function draw(learners, seed, learner)
      local ch = diloco.Chaos(learners)
      ch:poisson { learner = learner, mtbf = 50, down = 5, exponential_down = true, horizon = 5000, seed = seed }
      local out = {}
      for i = 1, ch:count() do out[i] = ch:get(i) end
      ch:close()
      return out
    end
    local a, b = draw(3, 42), draw(3, 42)
    assert.is_true(#a > 100)
    assert.are.same(a, b)
    assert.are_not.same(a, draw(3, 43))
    -- learner 3's failures do not depend on how many learners there are
    local function of(list, m)
      local out = {}
      for _, f in ipairs(list) do if f.learner == m then out[#out + 1] = f end end
      return out
    end
    assert.are.same(of(a, 3), of(draw(5, 42), 3))
    assert.are.same(of(a, 3), draw(5, 42, 3))
    for _, f in ipairs(a) do
      assert.are.equal("kill", f.kind)
      assert.is_true(f.learner >= 1 and f.learner <= 3)
    end
  end)

  it("raises naming the field", function()
    assert.matches("learners = 0", error_of(diloco.Chaos, 0))
    local ch = diloco.Chaos(4)
    assert.matches("learner = 5, expected an integer in 1..4 %(4 learners%)",
      error_of(ch.add, ch, { at = 0, kind = "kill", learner = 5, duration = 1 }))
    assert.matches("learner = 0", error_of(ch.add, ch, { at = 0, kind = "kill", learner = 0, duration = 1 }))
    assert.matches("learner is required", error_of(ch.add, ch, { at = 0, kind = "cut", duration = 1 }))
    assert.matches("syncer fault has no learner",
      error_of(ch.add, ch, { at = 0, kind = "syncer", learner = 1, duration = 1 }))
    assert.matches('kind = "crash"', error_of(ch.add, ch, { at = 0, kind = "crash", learner = 1, duration = 1 }))
    assert.matches("at = %-1", error_of(ch.add, ch, { at = -1, kind = "kill", learner = 1, duration = 1 }))
    assert.matches("duration = 0", error_of(ch.add, ch, { at = 0, kind = "kill", learner = 1, duration = 0 }))
    assert.matches("duration is required", error_of(ch.add, ch, { at = 0, kind = "kill", learner = 1 }))
    assert.matches("factor is required", error_of(ch.add, ch, { at = 0, kind = "slow", learner = 1, duration = 1 }))
    assert.matches("factor = 0", error_of(ch.add, ch, { at = 0, kind = "slow", learner = 1, duration = 1, factor = 0 }))
    assert.matches("factor is only for kind",
      error_of(ch.add, ch, { at = 0, kind = "kill", learner = 1, duration = 1, factor = 2 }))
    assert.matches("unknown field 'when'", error_of(ch.add, ch, { when = 0, kind = "kill", learner = 1, duration = 1 }))
    assert.matches("mtbf = 0", error_of(ch.poisson, ch, { mtbf = 0, down = 1, horizon = 10, seed = 1 }))
    assert.matches("seed = nil, expected an integer", error_of(ch.poisson, ch, { mtbf = 1, down = 1, horizon = 10 }))
    assert.matches("exponential_down must be a boolean",
      error_of(ch.poisson, ch, { mtbf = 1, down = 1, horizon = 10, seed = 1, exponential_down = 1 }))
    assert.matches("learner = 7", error_of(ch.poisson, ch, { learner = 7, mtbf = 1, down = 1, horizon = 10, seed = 1 }))
    assert.matches("DLC_CHAOS_MAX_FAULTS",
      error_of(ch.poisson, ch, { mtbf = 1e-3, down = 1e-3, horizon = 1e6, seed = 1 }))
    assert.matches("fault 1 out of range 1..0", error_of(ch.get, ch, 1))
    assert.matches("learner 5 out of range 1..4", error_of(ch.down_share, ch, 5, 10))
    assert.matches("horizon", error_of(ch.down_share, ch, 1, 0))
    assert.are.equal(0, ch:count()) -- nothing was added by a refused call
  end)

  it("pauses the syncer (kind pause naming no learner), with a shard and a role, and refuses them on a learner's", function()
    local ch = diloco.Chaos(2)
    ch:add { at = 5, kind = "pause", duration = 3, shard = 2, role = "standby" }
    local f = ch:get(1)
    assert.are.same({ "pause", nil, 2, "standby" }, { f.kind, f.learner, f.shard, f.role })
    assert.matches("shard is only for a fault of the syncer",
      error_of(ch.add, ch, { at = 0, kind = "pause", learner = 1, duration = 1, shard = 2 }))
    assert.matches("role is only for a fault of the syncer",
      error_of(ch.add, ch, { at = 0, kind = "pause", learner = 1, duration = 1, role = "both" }))
    assert.matches('role = backup: expected "primary"', error_of(ch.add, ch, { at = 0, kind = "pause", duration = 1, role = "backup" }), 1, true)
    assert.matches("shard = 17", error_of(ch.add, ch, { at = 0, kind = "pause", duration = 1, shard = 17 }))
    assert.are.equal(1, ch:count())
  end)

  it("closes once, and a closed schedule raises", function()
    local ch = diloco.Chaos(1)
    ch:close()
    ch:close()
    assert.matches("Chaos has been closed", error_of(ch.count, ch))
    assert.are.equal("Chaos(closed)", tostring(ch))
    do
      local c2 <close> = diloco.Chaos(2)
      c2:add { at = 1, kind = "cut", learner = 2, duration = 3 }
    end
  end)
end)

describe("Chaos:due and Chaos:slow_factor", function()
  it("hand out the timeline once, in order, when due; refuse bad arguments and a changed schedule", function()
    local ch = diloco.Chaos(2)
    ch:add { at = 1, kind = "slow", learner = 2, duration = 2, factor = 2 }
    ch:add { at = 2, kind = "slow", learner = 2, duration = 2, factor = 3 }
    assert.is_nil(ch:due(0.5))
    local e = ch:due(1)
    assert.are.same({ 1, true, "slow", 2, 1 }, { e.t, e.begin, e.kind, e.learner, e.fault })
    assert.is_nil(ch:due(1.5))
    assert.are.equal(6, ch:slow_factor(2, 2.5)) -- overlapping slows multiply
    assert.are.equal(1, ch:slow_factor(1, 2.5))
    local seen = {}
    for _ = 1, 3 do seen[#seen + 1] = ch:due(10).t end
    assert.are.same({ 2, 3, 4 }, seen)
    assert.is_nil(ch:due(math.huge))
    assert.has_error(function() ch:slow_factor(3, 1) end, "bad argument #1 to 'slow_factor' (learner 3 out of range 1..2)")
    assert.has_error(function() ch:slow_factor(1, 0 / 0) end)
    assert.has_error(function() ch:due(0 / 0) end)
    assert.has_error(function() ch:due("soon") end)
    ch:add { at = 9, kind = "kill", learner = 1, duration = 1 }
    local ok, err = pcall(ch.due, ch, 10)
    assert.is_false(ok)
    assert.matches("the schedule changed after the cursor started", tostring(err), 1, true)
  end)
end)
