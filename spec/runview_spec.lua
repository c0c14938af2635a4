-- runview.learner_progress: a learner's own metrics, read incrementally while it writes
-- them; its fault events go into the run's metrics.  A line caught half written is taken
-- whole once its end arrives (read as it stood, a rollback fault was lost under load).
local view = require "diloco.runview"
local H = require "spec.helpers"

describe("runview.learner_progress", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("takes a line the learner is still writing only once it is whole", function()
    local dir = S.dir .. "/learner-1"
    os.execute("mkdir -p " .. dir)
    local written = {}
    local ctx = { supervising = true, out = S.dir, learners = { {} }, t_start = 0, faults = 0,
      recipe = { hooks = {} }, metrics = { write = function(_, event, fields)
        written[#written + 1] = { event = event, fields = fields }
        return true
      end } }
    local f = assert(io.open(dir .. "/metrics.jsonl", "w"))
    local step = '{"event":"step","step":3,"loss":2.5}\n'
    local fault = '{"event":"fault","kind":"rollback","step":4,"in_a_row":1,"wall_s":1.5}\n'
    f:write(step, fault:sub(1, 20))
    f:flush()
    local p = view.learner_progress(ctx, 1)
    assert.are.equal(3, p.step)
    assert.are.equal(0, #written) -- half a fault line: nothing yet
    f:write(fault:sub(21), '{"event":"step","step":5,"loss":2.4}\n')
    f:flush()
    p = view.learner_progress(ctx, 1)
    assert.are.equal(5, p.step)
    assert.are.equal(1, #written)
    assert.are.same({ "fault", "rollback", 4, 1, 1, 1.5 }, { written[1].event, written[1].fields.kind,
      written[1].fields.step, written[1].fields.in_a_row, written[1].fields.learner, written[1].fields.learner_wall_s })
    assert.are.equal(1, ctx.faults)
    f:close()
  end)
end)
