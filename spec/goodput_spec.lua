-- diloco.goodput{...} (lua/lgoodput.c over core/goodput.h) and `diloco-lua goodput`
-- (lua/diloco/goodput.lua): options with units, the result table, bad values named, the
-- table and the optional gnuplot PNG.  ctest sets DILOCO_LUA for the CLI cases.
local diloco = require "diloco"
local H = require "spec.helpers"

local exe = os.getenv("DILOCO_LUA")
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

describe("diloco.goodput", function()
  it("runs with the defaults: elastic-dp at 1.2M chips near the calibrated 58%", function()
    local r = diloco.goodput { series = false, duration = "5d" }
    assert.are.equal("elastic-dp", r.params.policy)
    assert.are.equal(1200000, r.params.chips)
    assert.are.equal(365 * 86400, r.params.mtbi)
    assert.is_true(math.abs(r.goodput - 0.58) < 0.02, tostring(r.goodput))
    assert.is_nil(r.series)
    assert.are.equal(1, #r.learner_goodput)
  end)

  it("takes durations with units and returns the series", function()
    local r = diloco.goodput { policy = "decoupled", learners = 4, chips = 1e5, mtbi = "1y",
      duration = "2d", sample = "1h", repair = "30m", downscale = "7500ms", step = 2, seed = 3 }
    assert.are.equal(49, #r.series.t)
    assert.are.equal(3600, r.series.t[2])
    assert.are.equal(1800, r.params.repair)
    assert.are.equal(7.5, r.params.downscale)
    assert.are.equal(4, #r.learner_goodput)
    assert.is_true(r.uptime > 0.99 and r.goodput > 0.8 and r.goodput < 1)
    local again = diloco.goodput { policy = "decoupled", learners = 4, chips = 1e5, mtbi = "1y",
      duration = "2d", sample = "1h", repair = "30m", downscale = "7500ms", step = 2, seed = 3 }
    assert.are.equal(r.goodput, again.goodput)
    assert.are.equal(31536000, diloco.goodput_duration("1y"))
    assert.are.equal(90, diloco.goodput_duration("1.5m"))
    local v, msg = diloco.goodput_duration("3 weeks")
    assert.is_nil(v)
    assert.matches('expected a duration such as "30s"', msg)
  end)

  it("names a bad or unknown option and the expected form", function()
    assert.matches("mtbi = 1 year, expected a duration", H.error_of(diloco.goodput, { mtbi = "1 year" }))
    assert.matches("unknown option 'chip'", H.error_of(diloco.goodput, { chip = 5 }))
    assert.matches('policy = elastic, expected "dp", "elastic%-dp" or "decoupled"',
      H.error_of(diloco.goodput, { policy = "elastic" }))
    assert.matches("learners = 4 with policy elastic%-dp", H.error_of(diloco.goodput, { learners = 4 }))
    assert.matches("chips = 1.5, expected an integer >= 1", H.error_of(diloco.goodput, { chips = 1.5 }))
    assert.matches("step = 0, expected a finite duration > 0", H.error_of(diloco.goodput, { step = 0 }))
  end)
end)

describe("diloco-lua goodput", function()
  setup(function() assert(exe, "set DILOCO_LUA to the built diloco-lua executable") end)

  it("prints a table of mean ± sd over seeds for each policy", function()
    local out, code = H.sh(q(exe) .. " goodput --chips 3e5 --days 2 --seeds 3 --learners 4")
    assert.are.equal(0, code, out)
    assert.matches("dp%s+1%s+300k%s+365d%s+%d+%.%d+ ± %d+%.%d+", out)
    assert.matches("elastic%-dp%s+1%s+300k", out)
    assert.matches("decoupled%s+4%s+300k", out)
    assert.matches("3 seeds from 0, 2 days", out)
  end)

  it("models the syncer's shards for decoupled, dp and elastic-dp unchanged", function()
    local plain, code0 = H.sh(q(exe) .. " goodput --chips 3e5 --days 2 --seeds 2 --learners 4")
    assert.are.equal(0, code0, plain)
    local out, code = H.sh(q(exe) .. " goodput --chips 3e5 --days 2 --seeds 2 --learners 4 --set syncer_shards=2 "
      .. "--set syncer_mtbf=6h --set standby=1")
    assert.are.equal(0, code, out)
    assert.are.equal(plain:match("(dp%s+1%s+300k[^\n]*)"), out:match("(dp%s+1%s+300k[^\n]*)"))
    assert.matches("the syncer in 2 shards with standbys, each failing every 0.25d: seed 0 had %d+ failures", out)
    local r = diloco.goodput { policy = "decoupled", learners = 4, chips = 3e5, duration = "2d", series = false,
      syncer_shards = 2, syncer_mtbf = "6h" }
    assert.is_true(r.syncer_outages > 0 and r.syncer_lost > 0 and r.takeovers == 0)
    assert.are.equal(2, r.params.syncer_shards)
    assert.matches("standby = 3, expected 0 or 1", H.error_of(diloco.goodput, { policy = "decoupled", standby = 3 }))
  end)

  it("sweeps a parameter", function()
    local out, code = H.sh(q(exe) .. " goodput --policy elastic-dp --sweep chips=1e5,2e5 --days 1 --seeds 2")
    assert.are.equal(0, code, out)
    assert.matches("100k", out)
    assert.matches("200k", out)
  end)

  it("rejects a bad duration, policy or sweep with status 2 and the expected form", function()
    local out, code = H.sh(q(exe) .. " goodput --mtbi 1year")
    assert.are.equal(2, code)
    assert.matches('expected a duration such as "30s", "5m", "2h", "1y"', out)
    out, code = H.sh(q(exe) .. " goodput --policy fast")
    assert.are.equal(2, code)
    assert.matches("expected dp, elastic%-dp, decoupled or all", out)
    out, code = H.sh(q(exe) .. " goodput --sweep colour=1,2")
    assert.are.equal(2, code)
    assert.matches("expected KEY=V1,V2", out)
  end)

  it("draws the PNG when gnuplot exists (the table always)", function()
    local _, has = H.sh("command -v gnuplot")
    local png = os.tmpname() .. ".png"
    local out, code = H.sh(q(exe) .. " goodput --days 1 --seeds 2 --plot " .. q(png))
    assert.matches("elastic%-dp", out) -- the table comes first either way
    if has == 0 then
      assert.are.equal(0, code, out)
      local f = assert(io.open(png, "rb"))
      assert.are.equal("\137PNG", f:read(4))
      f:close()
      os.remove(png)
    else
      assert.are.equal(1, code)
      assert.matches("gnuplot not found", out)
    end
  end)
end)
