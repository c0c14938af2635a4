-- diloco.VTime's options are one run description (core/run.h): the learner and syncer
-- tables cannot disagree on what both state machines use, and the preset must fit.
local diloco = require "diloco"

-- a tiny model's Params, one per learner
local function params()
  local m = diloco.nn.GPT { vocab = 256, ctx = 8, dim = 8, layers = 1, heads = 1, seed = 1 }
  return diloco.Params(m:parameters())
end

describe("diloco.VTime reads one run description", function()
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

describe("run_json: the run as text, under the recipe's own names", function()
  local p1, p2 = params(), params()
  local plan = diloco.Plan(p1, { fragments = 1 })
  local function vt(run_json, learner, syncer)
    return pcall(diloco.VTime, { params = { p1, p2 }, plan = plan, step_time = 1, horizon = 40,
      islands = { { tokens = 8 }, { tokens = 8 } }, learner = learner or {}, syncer = syncer or {},
      run_json = run_json })
  end
  -- the merges of a run, as (time, fragment, version, contributors)
  local function merges(v)
    local out = {}
    while true do
      local e = v:next()
      if e.type == "done" then break end
      if e.type == "merge" then
        out[#out + 1] = string.format("%g:%d:%d:%d", e.time, e.merge.fragment, e.merge.version, #e.merge.contributors)
      end
      if e.type == "step" then v:step_done(e.learner, 8) end
    end
    v:close()
    return table.concat(out, " ")
  end

  it("runs the same run as the learner and syncer tables say it the older way", function()
    local ok, a = vt('{"sync": {"preset": "diloco", "H": 8, "tau": 0, "quorum": 2, "codec": "int4"}}')
    assert.is_true(ok, tostring(a))
    local ok2, b = vt(nil, { preset = "diloco", H = 8, tau = 0, codec = "int4" }, { quorum = 2 })
    assert.is_true(ok2, tostring(b))
    local ma, mb = merges(a), merges(b)
    assert.is_true(#ma > 0)
    assert.are.equal(mb, ma)
  end)

  it("names a bad field, and refuses a run field said the older way beside it", function()
    local ok, err = vt('{"sync": {"codec": "int3"}}')
    assert.is_false(ok)
    assert.matches('run: sync.codec = "int3": expected one of', tostring(err), 1, true)
    ok, err = vt('{"sync": {"fragments": 2000}}')
    assert.is_false(ok)
    assert.matches("sync.fragments = 2000: expected an integer in [1, 1024]", tostring(err), 1, true)
    ok, err = vt('{"sync": {"H": 8}}', { codec = "int4" })
    assert.is_false(ok)
    assert.matches("learner.codec: with run_json the run's fields come from it (sync.codec there)", tostring(err), 1,
      true)
    ok, err = vt('{"sync": {"H": 8}}', nil, { quorum = 1 })
    assert.is_false(ok)
    assert.matches("syncer.quorum: with run_json", tostring(err), 1, true)
    ok, err = vt(42)
    assert.is_false(ok)
    assert.matches("run_json must be a string", tostring(err), 1, true)
  end)
end)
