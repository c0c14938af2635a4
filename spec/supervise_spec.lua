-- diloco.Supervisor (lua/lsupervise.c over core/supervise.h): learners 1-based, actions as
-- tables, bad arguments named.  The rules themselves are ctest/test_supervise.c's.
local diloco = require "diloco"

local function drain(s)
  local out = {}
  for a in s:actions() do out[#out + 1] = a end
  return out
end

describe("diloco.Supervisor", function()
  it("speaks 1-based learners and gives actions as tables", function()
    local s = diloco.Supervisor { learners = 2, restarts = 3, restart_min = 2, restart_max = 8 }
    s:start(0)
    local a = drain(s)
    assert.are.same({ "spawn", 1, true, false }, { a[1].kind, a[1].learner, a[1].fresh, a[1].rollback })
    assert.are.same({ "island", 1, "up" }, { a[2].kind, a[2].learner, a[2].island })
    assert.are.equal(2, a[3].learner)
    s:exited(2, 1.5, 1)
    a = drain(s)
    assert.are.same({ "island", "off" }, { a[1].kind, a[1].island })
    assert.are.same({ "fault", "crash", true, false, 2 }, { a[3].kind, a[3].fault, a[3].begin, a[3].final, a[3].value })
    local l = s:learner(2)
    assert.are.same({ "down", 1, "crash", 3.5, false }, { l.state, l.crashes, l.down_cause, l.restart_at, l.process })
    s:tick(3.5)
    a = drain(s)
    assert.are.same({ "spawn", 2, false }, { a[1].kind, a[1].learner, a[1].fresh })
    assert.are.same({ "fault", "back", "crash" }, { a[3].kind, a[3].fault, a[3].cause })
    -- a kill for good of one rank: the signal names it; no restart ever
    s:kill(1, 4, nil, 0)
    a = drain(s)
    assert.are.same({ "signal", "KILL", 0 }, { a[2].kind, a[2].signal, a[2].rank })
    assert.are.equal(math.huge, a[3].value)
    s:exited(1, 4.1, nil, 9)
    drain(s)
    assert.are.equal(math.huge, s:learner(1).restart_at)
    assert.is_false(s:all_ended())
    s:stop(5)
    assert.are.same({ { "signal", 2, "TERM" } }, (function()
      local t = {}
      for _, x in ipairs(drain(s)) do t[#t + 1] = { x.kind, x.learner, x.signal } end
      return t
    end)())
    assert.is_true(s:stopping())
    s:exited(2, 6, 143)
    drain(s)
    assert.is_true(s:all_ended())
    assert.are.equal("stopped", s:learner(1).state)
  end)

  it("names what is wrong with its arguments", function()
    assert.has_error(function() diloco.Supervisor { learners = 0 } end,
      "Supervisor: learners = 0, expected an integer in 1..4096")
    assert.has_error(function() diloco.Supervisor { learners = 2, restart_min = -1 } end)
    local s = diloco.Supervisor { learners = 2 }
    assert.has_error(function() s:learner(3) end)
    assert.has_error(function() s:exited(1, 0, 0) end, "Supervisor:exited: learner 1 has no process")
    s:start(5)
    local ok, err = pcall(s.tick, s, 4)
    assert.is_false(ok)
    assert.matches("now = 4 goes back", err, 1, true)
    s:close()
    assert.has_error(function() s:tick(6) end)
  end)
end)
