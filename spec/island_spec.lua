-- diloco.island: the one island every driver hosts.  Its checkpoint (save, then restore
-- into a fresh island: parameters, optimizer state and step count, tokens, data cursor;
-- a file of another model or one the driver refuses leaves the island untouched), its
-- step line and hooks.on_step, the one model file's metadata, and a learner's refusal of
-- another learner's or another run's checkpoint.
local diloco = require "diloco"
local island = require "diloco.island"
local H = require "spec.helpers"
local scratch = H.scratch()
local tmp = scratch.dir

local function recipe(over)
  local t = {
    name = "isl", model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
    data = { kind = "synthetic_text", ctx = 16, batch = 4, bytes = 20000 }, steps = 40, seed = 5,
    log = { every = 4 }, checkpoint = { every = 10 },
  }
  for k, v in pairs(over or {}) do t[k] = v end
  return assert(diloco.recipe.validate(diloco.recipe(t)))
end

-- an island with its model and data, trained `steps` inner steps
local function trained(r, steps, fields)
  local I = island.new(r, fields or {})
  I:build()
  assert(I:open_data())
  I.recipe_json = "{}"
  for _ = 1, steps do I:inner_step() end
  return I
end

local function floats(plist)
  local out = {}
  for _, p in ipairs(plist) do out[#out + 1] = p[2]:tolist() end
  return out
end

-- a metrics writer that keeps its lines
local function lines_writer()
  local lines = {}
  return { lines = lines, write = function(_, event, fields)
    lines[#lines + 1] = { event = event, fields = fields }
    return true
  end }
end

describe("an island's checkpoint", function()
  it("restores into a fresh island what it saved: model, optimizer, counters, data cursor", function()
    local r = recipe()
    local A = trained(r, 7)
    A.rd = diloco.rundir.open(tmp .. "/a", { keep = 3 })
    A.metrics, A.out = lines_writer(), tmp .. "/a"
    assert(A:save(A.step))
    assert.are.equal(7, A.checkpoint_step)
    local ev = A.metrics.lines[#A.metrics.lines]
    assert.are.same({ "checkpoint", 7 }, { ev.event, ev.fields.step })

    local B = trained(r, 0)
    assert.are_not.same(floats(A.plist), floats(B.plist))
    local meta = assert(B:restore(A.checkpoint, { model = true }))
    assert.are.equal("7", meta["diloco.step"])
    assert.are.same(floats(A.plist), floats(B.plist))
    assert.are.same(floats(A.opt:state()), floats(B.opt:state()))
    assert.are.equal(A.opt:step_count(), B.opt:step_count())
    assert.are.equal(A.tokens, B.tokens)
    assert.are.same(A.loaders.train:state(), B.loaders.train:state())
    local saved_opt = floats(A.opt:state())
    -- both now take the same next step
    B.step = A.step
    assert.are.equal(A:inner_step().loss, B:inner_step().loss)

    -- without model: the optimizer and counters only, the parameters stay the island's
    local C = trained(r, 0)
    local before = floats(C.plist)
    assert(C:restore(A.checkpoint))
    assert.are.same(before, floats(C.plist))
    assert.are.same(saved_opt, floats(C.opt:state()))
    A.rd:close()
  end)

  it("leaves the island untouched when the file is another model's or refused", function()
    local A = trained(recipe(), 3)
    A.rd = diloco.rundir.open(tmp .. "/b", { keep = 3 })
    A.metrics, A.out = lines_writer(), tmp .. "/b"
    assert(A:save(3))
    A.rd:close()
    local other = trained(recipe { model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2 } }, 0)
    local before, opt_before = floats(other.plist), floats(other.opt:state())
    local meta, why = other:restore(A.checkpoint, { model = true })
    assert.is_nil(meta)
    assert.matches("has shape %[", why)
    assert.matches("this model expects", why, 1, true)
    assert.are.same(before, floats(other.plist))
    assert.are.same(opt_before, floats(other.opt:state()))
    assert.are.equal(0, other.tokens)

    local same = trained(recipe(), 0)
    local seen
    meta, why = same:restore(A.checkpoint, { model = true, check = function(m)
      seen = m["diloco.step"]
      return "not this one"
    end })
    assert.is_nil(meta)
    assert.are.same({ "3", "not this one" }, { seen, why })
    assert.are.equal(0, same.tokens)

    meta, why = same:restore(tmp .. "/absent.safetensors")
    assert.is_nil(meta)
    assert.matches("absent.safetensors", why, 1, true)
  end)
end)

describe("an island's step line", function()
  it("is written every log.every steps and from last_step on, with the driver's fields, and calls on_step", function()
    local calls = {}
    local r = recipe { hooks = { on_step = function(info) calls[#calls + 1] = info end } }
    local I = trained(r, 0, { id = 3, last_step = 6 })
    I.metrics = lines_writer()
    for step = 1, 7 do
      local info = I:inner_step()
      I:report(step, info, function() return { schedule = step + 100 } end, { virtual_s = step })
    end
    local steps = {}
    for _, l in ipairs(I.metrics.lines) do
      assert.are.equal("step", l.event)
      assert.are.equal(3, l.fields.learner)
      assert.are.equal(l.fields.step + 100, l.fields.schedule)
      assert.is_number(l.fields.tokens_per_s)
      steps[#steps + 1] = l.fields.step
    end
    assert.are.same({ 4, 6, 7 }, steps) -- log.every = 4, and last_step 6 on
    assert.are.equal(7, #calls)
    assert.are.same({ 3, 5, 5 }, { calls[5].learner, calls[5].step, calls[5].virtual_s })
    -- rate = false (a sim's islands, on virtual time): no wall-clock rate in its lines
    local V = trained(r, 0, { rate = false })
    V.metrics = lines_writer()
    V:report(4, V:inner_step())
    assert.is_nil(V.metrics.lines[1].fields.tokens_per_s)
  end)
end)

describe("an island's link to its syncer", function()
  it("sends sync.schedule's fragments of the step, then the step's end, through the one method set", function()
    local asked = {}
    local r = recipe { sync = { preset = "diloco", fragments = 3, schedule = function(learner, step, fragments)
      asked[#asked + 1] = { learner, step, fragments }
      if step % 2 == 0 then return { 3, 1 } end
    end } }
    local calls = {}
    local I = trained(r, 0, { id = 2, fragments = 3 })
    I.link = { contribute = function(p) calls[#calls + 1] = "contribute " .. p end,
      step_done = function(tokens, seconds) calls[#calls + 1] = string.format("step_done %d %g", tokens, seconds) end }
    assert.are.equal(0, I:step_done(7, 64, 0.5))
    assert.are.equal(2, I:step_done(8, 64, 0.25))
    assert.are.same({ { 2, 7, 3 }, { 2, 8, 3 } }, asked)
    assert.are.same({ "step_done 64 0.5", "contribute 3", "contribute 1", "step_done 64 0.25" }, calls)
    -- without a schedule of the recipe's: the step's end alone
    local J = trained(recipe(), 0, { id = 1, fragments = 3 })
    calls = {}
    J.link = I.link
    assert.are.equal(0, J:step_done(8, 64, 1))
    assert.are.same({ "step_done 64 1" }, calls)
  end)
end)

describe("island.save_model", function()
  it("writes the one model metadata every driver's model file carries", function()
    local r = recipe()
    local I = trained(r, 0)
    local path = tmp .. "/model.safetensors"
    assert(island.save_model(path, I.plist, r, 12, '{"x":1}', { ["diloco.learner"] = "2" }))
    local meta = diloco.safetensors_meta(path)
    assert.are.equal("isl", meta["diloco.recipe"])
    assert.are.equal("12", meta["diloco.step"])
    assert.are.equal('{"x":1}', meta["diloco.recipe_json"])
    assert.are.equal("2", meta["diloco.learner"])
    assert.are.same(r.model, diloco.json_decode(meta["diloco.model"]))
  end)
end)

describe("a learner process", function()
  it("restores only its own checkpoint: the same learner id of the same run", function()
    local learner = require "diloco.learner"
    local me = { id = 2, run_id = "x-1f3a" }
    assert.is_nil(learner.foreign(me, { ["diloco.learner"] = "2", ["diloco.run_id"] = "x-1f3a" }))
    assert.is_nil(learner.foreign(me, {})) -- an older version's file: taken as its own
    assert.are.equal("it is learner 1's, this is learner 2", learner.foreign(me, { ["diloco.learner"] = "1" }))
    assert.are.equal("it is run y-0000's, this is run x-1f3a",
      learner.foreign(me, { ["diloco.learner"] = "2", ["diloco.run_id"] = "y-0000" }))
  end)
end)
