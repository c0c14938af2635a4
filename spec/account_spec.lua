-- diloco.Account (lua/laccount.c over core/account.h): islands 1-based, states by name,
-- the learner's account table taken as its fates, rows by bucket name summing to 1, and
-- bad input refused naming what was wrong and what was expected, nothing changed.
local diloco = require "diloco"

local function near(a, b) return math.abs(a - b) < 1e-9 end

describe("diloco.Account", function()
  it("keeps states and work and gives rows, total, goodput and uptime by the C rules", function()
    local a = diloco.Account(2, 10)
    a:enter(1, "up", 10)
    a:enter(1, "paused", 20)
    a:enter(1, "up", 25)
    a:enter(2, "up", 10)
    a:enter(2, "done", 30)
    local st, since = a:state(1)
    assert.are.equal("up", st)
    assert.are.equal(25, since)
    assert.is_true(near(5, a:seconds(1, "paused", 40)))
    -- island 1: up 25 s; its process's clock ran through the pause (30 + 5 > 25): scaled
    a:set_work(1, { busy_s = 30, idle_s = 5, nominal_tps = 100, merged_steps = 3,
      fates = { sent_steps = 6, sent_s = 30, overwritten_s = 0 } })
    a:set_work(2, { busy_s = 20, nominal_tps = 300, merged_steps = 4, fates = { sent_steps = 4, sent_s = 20 } })
    local shares, sec = a:row(1, 40)
    local sum = 0
    for _, b in ipairs(diloco.ACCOUNT_BUCKETS) do sum = sum + shares[b] end
    assert.is_true(near(1, sum), "row sums to " .. sum)
    assert.is_true(near(5, sec.down), "paused is down")
    assert.is_true(near(25 * 30 / 35 / 2, sec.useful), "half its sent steps merged: " .. sec.useful)
    assert.is_true(near(25 * 5 / 35, sec.waiting))
    local s2 = a:row(2, 40)
    assert.is_true(near(20 / 30, s2.useful) and near(10 / 30, s2.done))
    local total = a:total(40)
    assert.is_true(near((100 * shares.useful + 300 * s2.useful) / 400, total.useful))
    a:merge(12, 6000)
    a:merge(31, 6000)
    assert.are.equal(2, a:merges())
    assert.is_true(near(12000 / (400 * 30), a:goodput(40)))
    assert.is_true(near(2 / 3, a:uptime(40, 10)))
    a:forget_merges(1)
    a:set_useful_tokens(6000)
    assert.is_true(near(1 / 3, a:uptime(40, 10)) and near(6000, a:useful_tokens()))
    assert.are.equal(10, a:t0())
    a:close()
    assert.has_error(function() a:merges() end, "calling 'merges' on bad self (Account has been closed)")
  end)

  it("refuses bad input naming it, and the account is unchanged", function()
    local a = diloco.Account(2, 0)
    local function fails(f, want)
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches(want, tostring(err), 1, true)
    end
    fails(function() diloco.Account(0, 0) end, "islands = 0, expected an integer in 1..4096")
    fails(function() diloco.Account(2, 0 / 0) end, "t0 = ")
    fails(function() a:enter(3, "up", 1) end, "island = 3, expected an integer in 1..2")
    fails(function() a:enter(1, "asleep", 1) end, "island state \"asleep\": expected off, starting, up, down, paused")
    fails(function() a:enter(1, "up", math.huge) end, "t = inf")
    fails(function() a:set_work(1, { busy_s = "lots" }) end, "busy_s must be a number, got a string")
    fails(function() a:set_work(1, { fates = { kept_s = -2 } }) end, "Account:set_work: island 1: account_set_work: kept_s = -2: expected a finite number >= 0")
    fails(function() a:set_work(1, { fates = 3 }) end, "fates must be a table (the learner's account), got a number")
    fails(function() a:merge(1, -1) end, "useful_tokens = -1")
    assert.are.equal("off", (a:state(1)))
    assert.are.equal(0, a:merges())
    local shares = a:row(1, 5)
    assert.is_true(near(1, shares.other), "never started: all other")
  end)
end)
