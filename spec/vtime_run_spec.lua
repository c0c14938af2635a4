-- diloco.VTime's options are one run description (core/run.h): the learner and syncer
-- tables cannot disagree on what both state machines use, and the preset must fit.
local diloco = require "diloco"

describe("diloco.VTime reads one run description", function()
  local function params()
    local m = diloco.nn.GPT { vocab = 256, ctx = 8, dim = 8, layers = 1, heads = 1, seed = 1 }
    return diloco.Params(m:parameters())
  end
  local p1, p2 = params(), params()
  local plan = diloco.Plan(p1, { fragments = 1 })
  local function opts(change)
    local o = { params = { p1, p2 }, plan = plan, step_time = 1, horizon = 10,
      islands = { { tokens = 8 }, { tokens = 8 } }, learner = { H = 8, tau = 2 }, syncer = { quorum = 1 } }
    change(o)
    return o
  end
  local cases = {
    { "two emas", function(o) o.learner.ema = 0.5; o.syncer.ema = 0.25 end,
      "syncer.ema = 0.25 but learner.ema = 0.5: a run has one ema" },
    { "an unknown preset", function(o) o.learner.preset = "async" end, 'sync.preset = "async"' },
    { "dp under another preset", function(o) o.learner.dp = true; o.learner.preset = "diloco" end,
      "sync.dp = 1 with sync.preset = diloco" },
    { "a preset of dp without dp", function(o) o.learner.preset = "dp" end, "sync.dp = 0 with sync.preset = dp" },
    { "steps that are not a count", function(o) o.steps = 2.5 end,
      "VTime: steps = 2.5: expected the run's steps (an integer > 0) or 0" },
    { "negative steps", function(o) o.steps = -3 end, "VTime: steps = -3: expected" },
    { "cores that are not a count", function(o) o.cores = 1.5 end, "VTime: VTime.cores = 1.5: expected an integer" },
  }
  for _, c in ipairs(cases) do
    it("refuses " .. c[1], function()
      local ok, err = pcall(diloco.VTime, opts(c[2]))
      assert.is_false(ok)
      assert.matches(c[3], tostring(err), 1, true)
    end)
  end
  it("takes one ema given twice, and a preset that fits", function()
    for _, change in ipairs {
      function(o) o.learner.ema = 0.25; o.syncer.ema = 0.25 end,
      function(o) o.learner.preset = "streaming" end,
      function(o) o.learner.dp = true end, -- dp: the dp preset by default
    } do
      local vt = diloco.VTime(opts(change))
      assert.are.equal("step", vt:next().type)
      vt:close()
    end
  end)
end)
