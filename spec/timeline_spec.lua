-- One recipe's scripted faults mean the same under `sim` and `run` (issue 36): both read the
-- schedule through core/chaos.h's cursor (merged by one set of rules, ties in one order)
-- and keep the account with core/account.h.  A kill, a pause, two overlapping slows and a
-- cut, on three islands: the same fault events in the same order, at the schedule's times
-- (sim exactly; run within what its supervisor loop and the host's load need), and the
-- same down time for the killed and the paused island.  The learner processes pace
-- themselves (at least 2 ms a step, in their on_step hook) so that the run outlasts the
-- schedule on any machine; sim runs unpaced.
local H = require "spec.helpers"
local events, of_kind, summary_of = H.events, H.of_kind, H.summary_of

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"

local SCHEDULE = [[{
    { at = "0.4s", slow = 3, factor = 2, duration = "1.2s" },
    { at = "0.5s", kill = 1, down = "0.8s" },
    { at = "0.7s", pause = 2, down = "0.8s" },
    { at = "0.9s", slow = 3, factor = 1.5, duration = "1.2s" },
    { at = "2s", cut = 2, down = "0.4s" },
  }]]
-- the faults it holds: kind, island, begin, time on the schedule
local WANT = {
  { "slow", 3, true, 0.4 }, { "kill", 1, true, 0.5 }, { "pause", 2, true, 0.7 }, { "slow", 3, true, 0.9 },
  { "kill", 1, false, 1.3 }, { "pause", 2, false, 1.5 }, { "slow", 3, false, 1.6 }, { "cut", 2, true, 2.0 },
  { "slow", 3, false, 2.1 }, { "cut", 2, false, 2.4 },
}
local KINDS = { kill = true, pause = true, slow = true, cut = true }

local function recipe(S)
  return S.write("faults.lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = "faults",
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 16, batch = 8 },
  inner = diloco.optim.adamw { lr = 3e-3 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "decoupled", H = 16, fragments = 2, tau = 1 },
  islands = { count = 3, step_time = "2ms" },
  runtime = { heartbeat = "0.5s", timeout = "3s", drain = "10s" },
  steps = %d,
  eval = { every = 0, batches = 2 },
  chaos = %s,
  hooks = { on_step = function()
    if os.getenv("DILOCO_SUPERVISOR") then diloco.proc.sleep(0.002) end -- a learner process of run
  end },
}
]], sanitized and 1500 or 2000, SCHEDULE))
end

-- The scripted kinds' fault events of a metrics file, as {kind, learner, begin, t}.
local function timeline(path, clock)
  local out = {}
  for _, e in ipairs(of_kind(events(path), "fault")) do
    if KINDS[e.kind] then out[#out + 1] = { e.kind, e.learner, e.begin, e[clock] } end
  end
  return out
end

local function same(want, got, tol, who)
  local function show(l)
    local parts = {}
    for _, x in ipairs(l) do parts[#parts + 1] = string.format("%s %d %s %.2f", x[1], x[2], tostring(x[3]), x[4] or -1) end
    return table.concat(parts, "; ")
  end
  assert.are.equal(#want, #got, who .. ": " .. show(got))
  for i, w in ipairs(want) do
    local g = got[i]
    assert.is_true(w[1] == g[1] and w[2] == g[2] and w[3] == g[3], who .. " event " .. i .. ": " .. show(got))
    assert.is_true(math.abs(w[4] - g[4]) <= tol, string.format("%s event %d (%s %d) at %.3f s, the schedule says %.3f",
      who, i, g[1], g[2], g[4], w[4]))
  end
end

describe("one fault schedule under sim and run", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("gives the same fault timeline and the same down time", function()
    local path = recipe(S)
    local out, code = H.sh(string.format("%s sim %s --out %s/sim --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    same(WANT, timeline(S.dir .. "/sim/metrics.jsonl", "virtual_s"), 1e-9, "sim")
    -- run: its supervisor acts within a loop turn of the time (more under a sanitizer and load)
    same(WANT, timeline(S.dir .. "/run/metrics.jsonl", "schedule_s"), sanitized and 1.0 or 0.35, "run")
    -- the account's down time: 0.8 s killed (island 1), 0.8 s paused (island 2), none for 3
    local sim = summary_of(events(S.dir .. "/sim/metrics.jsonl"))
    local run = summary_of(events(S.dir .. "/run/metrics.jsonl"))
    local horizon = sim.horizon_s -- (the window its shares are of)
    for m, want in ipairs { 0.8, 0.8, 0 } do
      local sim_down = sim.per_learner[m].account.down * horizon
      local p = run.per_learner[m]
      local run_down = p.down_s + p.paused_s
      assert.is_true(math.abs(sim_down - want) < 1e-6, string.format("sim: island %d down %.3f s", m, sim_down))
      assert.is_true(math.abs(run_down - want) <= (sanitized and 1.0 or 0.35),
        string.format("run: island %d down %.3f s, the schedule says %.1f", m, run_down, want))
      for _, a in ipairs { sim.per_learner[m].account, p.account } do
        local sum = 0
        for _, v in pairs(a) do sum = sum + v end
        assert.is_true(math.abs(sum - 1) < 1e-9, "an account row sums to " .. sum)
      end
    end
  end)
end)
