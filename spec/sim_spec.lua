-- `diloco-lua sim` end to end (lua/diloco/sim.lua over diloco.VTime): a tiny GPT on 3
-- islands with H = 8 and 40 steps.  The metrics of a decoupled run, determinism, the
-- first equivalence (decoupled with K = all, no grace, P = 1, tau = 0, uniform, mean
-- == diloco bit for bit), dp == one model on the 2x batch (through diloco.VTime in Lua),
-- a scripted kill, the hooks and sync.quorum as a function, and bad input (exit 2).
-- Well under a minute in a release build; DILOCO_SANITIZED=1 trains fewer steps.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"

local H = require "spec.helpers"
local sh, read_lines = H.sh, H.read_lines
local scratch = H.scratch()
local tmp, write = scratch.dir, scratch.write

local STEPS = sanitized and 24 or 40
local DP_STEPS = sanitized and 8 or 20

local TINY = [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 16, batch = 4 },
  inner = diloco.optim.adamw { lr = 3e-3, warmup = 2 },
  steps = ]] .. STEPS .. [[, eval = { every = 10, batches = 2 }, seed = 3, log = { every = 1 },
  %s
}
]]

-- The recipe's sync and islands sections (each a string of fields), and anything more.
local function recipe(sync, islands, extra)
  return TINY:format(string.format("sync = { H = 8, %s },\n  islands = { count = 3, %s },\n  %s", sync or "",
    islands or "", extra or ""))
end

local n = 0
-- Runs `sim` on that recipe into a fresh OUT; returns out, status, the output, the
-- decoded metrics lines.
local function sim(text, flags)
  n = n + 1
  local path = write("r" .. n .. ".lua", text)
  local out = tmp .. "/out" .. n
  local output, status = sh(string.format("%s sim %s --out %s --quiet %s", exe, path, out, flags or ""))
  local events = {}
  for i, l in ipairs(read_lines(out .. "/metrics.jsonl")) do
    events[i] = assert(diloco.json_decode(l), "metrics line " .. i .. " is not JSON: " .. l)
  end
  return out, status, output, events
end

local function of(events, kind)
  local r = {}
  for _, e in ipairs(events) do
    if e.event == kind then r[#r + 1] = e end
  end
  return r
end

local function summary(events)
  local last = events[#events]
  assert.is_table(last, "no metrics")
  assert.are.equal("summary", last.event)
  return last
end

-- Every tensor of a model.safetensors, as nested lists.
local function tensors(path)
  local t, meta = diloco.load_safetensors(path)
  assert.is_truthy(t, tostring(meta))
  local r = {}
  for name, x in pairs(t) do r[name] = x:tolist() end
  return r
end

describe("diloco-lua sim, decoupled on 3 islands", function()
  local out, status, output, events
  setup(function() out, status, output, events = sim(recipe("preset = 'decoupled'")) end)

  it("exits 0 and writes merge events with their contributors", function()
    assert.are.equal(0, status, output)
    local merges = of(events, "merge")
    assert.is_true(#merges >= STEPS // 8, "merges: " .. #merges)
    local fragments = {}
    for _, m in ipairs(merges) do
      for _, k in ipairs { "fragment", "version", "grace", "waited", "virtual_s" } do
        assert.is_number(m[k], "merge." .. k)
      end
      fragments[m.fragment] = true
      assert.is_true(#m.contributors >= 1)
      for _, c in ipairs(m.contributors) do
        for _, k in ipairs { "learner", "weight", "staleness", "steps", "tokens" } do
          assert.is_number(c[k], "contributor." .. k)
        end
        assert.is_true(c.learner >= 1 and c.learner <= 3)
        assert.is_true(c.weight > 0 and c.steps > 0 and c.tokens == c.steps * 64)
      end
      assert.is_true(m.virtual_s <= STEPS + 1)
    end
    assert.is_truthy(fragments[1] and fragments[2], "several fragments merged")
  end)

  it("on equal islands every round holds every island's contribution, in its grace window", function()
    -- Equal islands send each fragment at the same instant: the adaptive window (tau = 2
    -- steps minus the links' share) must keep the round open for all three, and a merged
    -- fragment arriving as a step ends must wait for that step (it once reset the counters
    -- under the step and the next rounds merged one island at a time, with 1-step work).
    for _, m in ipairs(of(events, "merge")) do
      if not m.flushed then
        assert.are.equal(3, #m.contributors, "merge of fragment " .. m.fragment .. " v" .. m.version)
        assert.is_true(m.all_sent)
        assert.is_true(m.grace > 0, "grace window " .. m.grace)
        for _, c in ipairs(m.contributors) do
          assert.is_true(c.steps >= 2, "contribution of " .. c.steps .. " steps")
          assert.are.equal(0, c.staleness)
        end
      end
    end
  end)

  it("writes step events of each learner and evals of the global model", function()
    local by = {}
    for _, s in ipairs(of(events, "step")) do by[s.learner] = (by[s.learner] or 0) + 1 end
    for m = 1, 3 do assert.is_true((by[m] or 0) >= STEPS - 1, "steps of learner " .. m) end
    local evals = of(events, "eval")
    assert.are.equal(STEPS // 10 + 1, #evals) -- every 10 virtual seconds and the final one
    assert.is_true(evals[#evals].final)
    assert.is_true(evals[#evals].loss < evals[1].loss, "the global model learned")
    assert.is_true(evals[1].loss < math.log(256))
  end)

  it("ends with the summary", function()
    local s = summary(events)
    assert.are.equal("decoupled", s.preset)
    assert.are.equal(3, s.learners)
    assert.is_true(s.goodput > 0 and s.goodput <= 1, "goodput " .. s.goodput)
    assert.is_true(s.uptime >= 0 and s.uptime <= 1, "uptime " .. s.uptime)
    assert.is_true(s.bytes_up > 0 and s.bytes_down > 0)
    -- steps * islands.step_time (1 s), and the drain: messages in flight, no timeouts
    assert.is_true(s.virtual_s >= STEPS and s.virtual_s < STEPS + 1, "virtual_s " .. s.virtual_s)
    assert.are.equal(3, #s.idle)
    for m = 1, 3 do assert.is_true(s.idle[m] >= 0 and s.idle[m] < 1) end
    assert.are.equal(0, #of(events, "fault"), "no faults: nobody is lost in the drain")
    assert.are.equal(s.steps * 64, s.tokens)
  end)

  it("saves the global model for sample", function()
    local o, st = sh(exe .. " sample " .. out .. "/model.safetensors --tokens 8 --seed 1")
    assert.are.equal(0, st, o)
    assert.is_true(#o >= 8)
  end)
end)

-- The metrics without their wall-clock fields.
local WALL = { time = true, wall_s = true, train_s = true, tokens_per_s = true }
local function virtual(events)
  local r = {}
  for i, e in ipairs(events) do
    local c = {}
    for k, v in pairs(e) do
      if not WALL[k] then c[k] = v end
    end
    r[i] = c
  end
  return r
end

describe("diloco-lua sim on the terminal", function()
  it("names what it shows: island 1's training loss, the global model's evals, the eval before and after the "
    .. "final flush", function()
    local path = write("labels.lua", recipe("preset = 'decoupled'"))
    -- an eval at the horizon too (every half of the run)
    local out, st = sh(string.format("%s sim %s --out %s/labels --overwrite --set eval.every=%d", exe, path, tmp,
      STEPS // 2))
    assert.are.equal(0, st, out)
    assert.matches("the bar shows island 1's training loss (an EMA over about 10 of its steps), each eval the "
      .. "global model's", out, 1, true)
    assert.matches("step %d+/%d+  island 1 loss %d", out)
    assert.matches(string.format("eval at step %d: global loss [%%d.]+ %%(before the rounds still open are "
      .. "merged%%)", STEPS), out)
    -- (sync.final_flush is false here: the line does not claim one)
    local final = out:match("final eval, after the last merges: global loss ([%d.]+)")
    assert.is_truthy(final, out)
    assert.matches("done: 3 islands, %d+ steps, final eval loss " .. final:gsub("%.", "%%."), out)
  end)
end)

describe("diloco-lua sim is deterministic", function()
  it("the same recipe twice gives the same metrics, another seed others", function()
    local text = recipe("preset = 'decoupled'")
    local m1, m2, m3 = tmp .. "/d1.jsonl", tmp .. "/d2.jsonl", tmp .. "/d3.jsonl"
    local path = write("det.lua", text)
    local models = {}
    local function go(metrics, flags)
      local o, st = sh(string.format("%s sim %s --out %s/det --overwrite --quiet --metrics %s %s", exe, path, tmp,
        metrics, flags or ""))
      assert.are.equal(0, st, o)
      local f = assert(io.open(tmp .. "/det/model.safetensors", "rb"))
      models[#models + 1] = f:read("a")
      f:close()
      local ev = {}
      for i, l in ipairs(read_lines(metrics)) do ev[i] = diloco.json_decode(l) end
      assert.is_true(#ev > 10)
      return virtual(ev)
    end
    local a, b, c = go(m1), go(m2), go(m3, "--set seed=4")
    assert.are.same(a, b)
    -- and the same model file, byte for byte (its metadata too: seen, the model's JSON
    -- in another key order each run)
    assert.is_true(models[1] == models[2], "the two runs' model.safetensors differ")
    assert.are_not.same(a, c)
    assert.are_not.equal(a[#a].final_eval_loss, c[#c].final_eval_loss)
  end)
end)

describe("the first equivalence", function()
  local ZERO = "latency = 0, bandwidth = 'inf'"
  local EQUIV = "preset = 'decoupled', quorum = 'all', grace = 'off', fragments = 1, tau = 0, weighting = 'uniform', "
    .. "merge = 'mean', blocking = false"
  it("decoupled with K = all, no grace, P = 1, tau = 0, uniform, mean is diloco bit for bit", function()
    local o1, s1, t1, e1 = sim(recipe(EQUIV, ZERO))
    assert.are.equal(0, s1, t1)
    local o2, s2, t2, e2 = sim(recipe("preset = 'diloco'", ZERO))
    assert.are.equal(0, s2, t2)
    assert.is_true(#of(e1, "merge") >= STEPS // 8 and #of(e1, "merge") == #of(e2, "merge"))
    local a, b = tensors(o1 .. "/model.safetensors"), tensors(o2 .. "/model.safetensors")
    local names = 0
    for name, x in pairs(b) do
      names = names + 1
      assert.are.same(x, a[name], name)
    end
    assert.is_true(names > 4)
    assert.are.equal(summary(e2).final_eval_loss, summary(e1).final_eval_loss)
    -- the control: decoupled's own quorum and grace give another model
    local o3, s3, t3 = sim(recipe("preset = 'decoupled', fragments = 1, tau = 0, weighting = 'uniform', "
      .. "merge = 'mean'", ZERO))
    assert.are.equal(0, s3, t3)
    local c, differs = tensors(o3 .. "/model.safetensors"), false
    for name, x in pairs(b) do
      if not require("luassert.util").deepcompare(x, c[name]) then differs = true end
    end
    assert.is_true(differs, "quorum 1 with an adaptive grace gave the diloco model")
  end)
end)

describe("dp on diloco.VTime", function()
  it("2 learners with averaged gradients equal one model on the 2x batch", function()
    local spec = { vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, seed = 5 }
    -- eps = 1e-6: Adam divides by sqrt(v) + eps, so with 1e-8 an element whose gradient
    -- is a near-cancellation of the two halves (~1e-8) turns float rounding into a 1e-5
    -- parameter difference in one step; the clip at 0.5 is active (the norm starts at ~2)
    local opt = { kind = "adamw", lr = 1e-3, weight_decay = 0.1, eps = 1e-6 }
    local CLIP = 0.5
    local ds = diloco.TextData { synthetic = 20000, seed = 1 }
    local la = ds:loader { split = "train", batch = 4, ctx = 16, shard = 1, shards = 2, seed = 1 }
    local lb = ds:loader { split = "train", batch = 4, ctx = 16, shard = 2, shards = 2, seed = 1 }
    local batches = {}
    for s = 1, DP_STEPS do
      local xa, ya = la:next()
      local xb, yb = lb:next()
      batches[s] = { { xa, ya }, { xb, yb } }
    end
    local function build()
      local m = diloco.nn.GPT(spec)
      m:train()
      local pl = m:parameters()
      local p = diloco.Params(pl)
      return { model = m, plist = pl, params = p, opt = diloco.Optimizer(p, opt) }
    end
    -- the reference: one model on A ++ B
    local ref = build()
    for s = 1, DP_STEPS do
      local a, b = batches[s][1], batches[s][2]
      ref.params:zero_grad()
      local loss = ref.model:loss(diloco.concat { a[1], b[1] }, diloco.concat { a[2], b[2] })
      loss:backward()
      loss:free()
      ref.params:clip_grad_norm(CLIP)
      ref.opt:step()
    end
    -- the driver: learner m on its batch, the averaged gradient clipped
    local L = { build(), build() }
    local vt = diloco.VTime {
      params = { L[1].params, L[2].params }, plan = diloco.Plan(L[1].params, { fragments = 1 }),
      step_time = 1, horizon = DP_STEPS, islands = { { tokens = 64 }, { tokens = 64 } },
      learner = { dp = true }, syncer = { quorum = 0, grace = "off" },
    }
    local steps, optims = { 0, 0 }, 0
    while true do
      local ev = vt:next()
      if ev.type == "done" then break end
      if ev.type == "step" then
        local l, xy = L[ev.learner], batches[ev.step][ev.learner]
        l.params:zero_grad()
        local loss = l.model:loss(xy[1], xy[2])
        loss:backward()
        loss:free()
        vt:gradient_done(ev.learner, 64)
      elseif ev.type == "optim" then
        local l = L[ev.learner]
        l.params:clip_grad_norm(CLIP)
        l.opt:step()
        vt:optim_done(ev.learner)
        steps[ev.learner] = steps[ev.learner] + 1
        optims = optims + 1
      end
    end
    assert.are.same({ DP_STEPS, DP_STEPS }, steps)
    local st = vt:stats()
    assert.are.equal(DP_STEPS, st.learners[1].steps)
    for m = 1, 2 do
      for i, p in ipairs(L[m].plist) do
        H.assert_near(ref.plist[i][2]:tolist(), p[2]:tolist(), 1e-5, "learner " .. m .. " " .. p[1])
      end
    end
    -- and a control: one learner's batch alone is not the 2x batch
    local solo = build()
    for s = 1, DP_STEPS do
      local a = batches[s][1]
      solo.params:zero_grad()
      local loss = solo.model:loss(a[1], a[2])
      loss:backward()
      loss:free()
      solo.params:clip_grad_norm(CLIP)
      solo.opt:step()
    end
    assert.is_false(pcall(H.assert_near, ref.plist[1][2]:tolist(), solo.plist[1][2]:tolist(), 1e-5))
  end)
end)

describe("diloco-lua sim with stalled links and a syncer outage", function()
  -- blocking diloco (quorum = every live island) cannot lose a contribution silently:
  -- a stalled link delivers late, a restarted syncer resyncs the islands blocked on it
  -- merges of every island after time t
  local function merges_after(events, t)
    local n = 0
    for _, m in ipairs(of(events, "merge")) do
      if m.virtual_s > t and not m.flushed and #m.contributors == 3 then n = n + 1 end
    end
    return n
  end
  for _, c in ipairs {
    { "a cut shorter than the timeout", "chaos = { { at = '7.5s', cut = 2, down = '3s' } }," },
    { "a syncer outage", "chaos = { { at = '7.5s', syncer = 'down', down = '4s' } }," },
  } do
    it(c[1] .. " delays diloco, which then goes on merging every island", function()
      local _, status, output, events = sim(recipe("preset = 'diloco'", nil, c[2]))
      assert.are.equal(0, status, output)
      -- the fault ends by 12 s; with H = 8 a round of all three follows at least every ~8 s
      local want = (STEPS - 16) // 8
      assert.is_true(merges_after(events, 16) >= want,
        string.format("merges of all islands after 16 s: %d, expected >= %d", merges_after(events, 16), want))
      local s = summary(events)
      for m = 1, 3 do assert.is_true(s.per_learner[m].steps >= STEPS // 2, "island " .. m) end
    end)
  end
end)

describe("diloco.VTime refuses bad options", function()
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
    { "no params", function(o) o.params = nil end, "params must be a list of Params" },
    { "an island missing", function(o) o.islands[2] = nil end, "islands must be a list of 2 island tables" },
    { "speed 0", function(o) o.islands[1].speed = 0 end, "island 1: speed = 0: expected a finite number > 0" },
    { "no horizon", function(o) o.horizon = nil end, "end = 0: expected seconds > 0" },
    { "tau >= H", function(o) o.learner.tau = 8 end, "tau = 8: expected 0 <= tau < H = 8" },
    { "a bad grace", function(o) o.syncer.grace = "sometimes" end,
      'syncer.grace = sometimes: expected "adaptive", "off" or seconds' },
    { "a bad codec", function(o) o.learner.codec = "int3" end, "int3" },
    { "a bad weighting", function(o) o.syncer.weighting = "heavy" end, "heavy" },
    { "quorum above the learners", function(o) o.syncer.quorum = 3 end, "quorum = 3 but learners = 2" },
    { "a number for a flag", function(o) o.learner.blocking = 1 end, "learner.blocking must be a boolean" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local ok, err = pcall(diloco.VTime, opts(c[2]))
      assert.is_false(ok)
      assert.matches(c[3], tostring(err), 1, true)
    end)
  end
  it("and still builds from good ones", function()
    local vt = diloco.VTime(opts(function() end))
    assert.are.equal("step", vt:next().type)
    vt:close()
  end)
end)

describe("diloco-lua sim with a kill", function()
  local marker = tmp .. "/faults.txt"
  local KILL = "chaos = { { at = '10s', kill = 2, down = '8s' } },"

  it("kills learner 2 for 8 s, restarts it with a fresh optimizer, calls hooks.on_fault", function()
    local hook = string.format([[hooks = { on_fault = function(info)
      local f = assert(io.open(%q, "a"))
      f:write(info.kind, " ", tostring(info.learner), " ", tostring(info.begin), " ", tostring(info.virtual_s), "\n")
      f:close()
    end },]], marker)
    local _, status, output, events = sim(recipe("preset = 'decoupled'", nil, KILL .. hook))
    assert.are.equal(0, status, output)
    local kills = {}
    for _, f in ipairs(of(events, "fault")) do
      if f.kind == "kill" then kills[#kills + 1] = f end
    end
    assert.are.equal(2, #kills)
    assert.are.equal(2, kills[1].learner)
    assert.is_true(kills[1].begin)
    assert.are.equal(10, kills[1].virtual_s)
    assert.are.equal(2, kills[2].learner)
    assert.is_false(kills[2].begin)
    assert.are.equal(18, kills[2].virtual_s)
    assert.are.equal("fresh", kills[2].optimizer)
    assert.is_nil(kills[1].optimizer)
    local s = summary(events)
    local per = s.per_learner
    assert.is_true(per[2].steps < per[1].steps - 5 and per[2].steps < per[3].steps - 5,
      string.format("steps %d %d %d", per[1].steps, per[2].steps, per[3].steps))
    assert.is_true(per[2].down > 0)
    assert.is_nil(s.error)
    if not sanitized then
      -- back in step: learner 2 resumed the run's schedule phase, so rounds after its
      -- return hold all three islands again (each learner's own phase left it alone in
      -- rounds of its own, overwriting the others' work)
      local full = 0
      for _, m in ipairs(of(events, "merge")) do
        if m.virtual_s > 26 and not m.flushed then
          assert.are.equal(3, #m.contributors, "merge of fragment " .. m.fragment .. " at " .. m.virtual_s)
          full = full + 1
        end
      end
      assert.is_true(full >= 2, "full rounds after the rejoin: " .. full)
    end
    local lines = read_lines(marker)
    assert.is_true(#lines >= 2)
    assert.are.equal("kill 2 true 10.0", lines[1])
    local ends = 0
    for _, l in ipairs(lines) do
      if l == "kill 2 false 18.0" then ends = ends + 1 end
    end
    assert.are.equal(1, ends, table.concat(lines, "\n"))
  end)

  it("passes sync.schedule the run's schedule step, as a learner process does: past the down time", function()
    -- learner 2 is down from 10 s to 18 s (8 steps at 1 s): back, it goes on at the run's
    -- step, not at its own count of steps, so the steps it is asked about jump by about 8
    local log = tmp .. "/sched.txt"
    local _, status, output = sim(recipe(string.format([[preset = 'diloco', fragments = 2,
      schedule = function(learner, step)
        if learner == 2 then
          local f = assert(io.open(%q, "a"))
          f:write(step, "\n")
          f:close()
        end
        if step %% 4 == 0 then return { 1, 2 } end
      end]], log), nil, KILL))
    assert.are.equal(0, status, output)
    local steps, jump = {}, 0
    for _, l in ipairs(read_lines(log)) do steps[#steps + 1] = tonumber(l) end
    for i = 2, #steps do
      assert.is_true(steps[i] > steps[i - 1], "increasing: " .. table.concat(steps, " "))
      jump = math.max(jump, steps[i] - steps[i - 1])
    end
    assert.is_true(jump >= 6, "the largest jump " .. jump .. " in " .. table.concat(steps, " "))
  end)

  it("does not deadlock a blocking run of several fragments when a learner rejoins", function()
    -- blocking with 4 fragments: the rejoined learner's schedule may reach another fragment
    -- than the one the others wait for; the syncer must not wait for it there
    local _, status, output, events = sim(recipe("preset = 'streaming', fragments = 4, blocking = true", nil, KILL))
    assert.are.equal(0, status, output)
    local s = summary(events)
    assert.is_true(s.per_learner[1].idle < 0.1 and s.per_learner[3].idle < 0.1,
      string.format("idle %.3f %.3f %.3f", s.per_learner[1].idle, s.per_learner[2].idle, s.per_learner[3].idle))
  end)

  it("stops with exit 1 when hooks.on_fault raises", function()
    local _, status, output, events = sim(recipe("preset = 'decoupled'", nil, KILL ..
      "hooks = { on_fault = function(info) error('no faults here') end },"))
    assert.are.equal(1, status, output)
    assert.matches("hooks.on_fault failed: ", output, 1, true)
    assert.matches("no faults here", output, 1, true)
    local s = summary(events)
    assert.matches("hooks.on_fault", s.error, 1, true)
  end)
end)

describe("diloco-lua sim hooks and a quorum function", function()
  it("passes the contributors to hooks.on_merge and merges with the quorum the function gives", function()
    local marker = tmp .. "/merges.txt"
    local _, status, output, events = sim(recipe(string.format([[preset = 'decoupled',
      quorum = function(live, info) return live >= 3 and 2 or 1 end]]), nil, string.format([[hooks = {
      on_merge = function(info)
        local f = assert(io.open(%q, "a"))
        f:write(info.fragment, " ", info.version, " ", #info.contributors, " ", info.contributors[1].learner, "\n")
        f:close()
      end },]], marker)))
    assert.are.equal(0, status, output)
    local merges = of(events, "merge")
    assert.is_true(#merges > 0)
    for _, m in ipairs(merges) do
      assert.are.equal(2, m.quorum)
      assert.is_true(#m.contributors >= 2 or m.flushed, "a merge below the quorum")
    end
    local lines = read_lines(marker)
    assert.are.equal(#merges, #lines)
    assert.are.equal(string.format("%d %d %d %d", merges[1].fragment, merges[1].version, #merges[1].contributors,
      merges[1].contributors[1].learner), lines[1])
  end)
end)

describe("diloco-lua sim with mixed islands", function()
  it("gives each island its speed and batch: step time, steps, tokens and weights follow", function()
    -- island 1: speed 1, batch 4; island 2: speed 0.5; island 3: batch 8 (a step is twice the work)
    local text = TINY:format([[sync = { H = 8, preset = 'decoupled' },
      islands = { { speed = 1 }, { speed = 0.5 }, { batch = 8 }, latency = 0, bandwidth = 'inf' },]])
    local _, status, output, events = sim(text)
    assert.are.equal(0, status, output)
    local per = summary(events).per_learner
    assert.are.equal(STEPS, per[1].steps)
    assert.are.equal(STEPS // 2, per[2].steps)
    assert.are.equal(STEPS // 2, per[3].steps)
    assert.are.equal(STEPS * 64, per[1].tokens)
    assert.are.equal(STEPS // 2 * 64, per[2].tokens)
    assert.are.equal(STEPS // 2 * 128, per[3].tokens)
    -- tokens^2/steps: island 3's contribution over the same time weighs 4x island 2's
    local seen = 0
    for _, m in ipairs(of(events, "merge")) do
      local w = {}
      for _, c in ipairs(m.contributors) do w[c.learner] = c end
      if w[2] and w[3] and w[2].steps == w[3].steps then
        assert.are.equal(2 * w[2].tokens, w[3].tokens)
        assert.is_true(math.abs(w[3].weight / w[2].weight - 4) < 1e-9)
        seen = seen + 1
      end
    end
    assert.is_true(seen > 0, "a merge with islands 2 and 3 of equal steps")
  end)

  it("spreads each step's time with islands.jitter, the same way for the same seed", function()
    local text = TINY:format([[sync = { H = 8, preset = 'decoupled' },
      islands = { count = 3, jitter = 0.5, latency = 0, bandwidth = 'inf' },]])
    local _, status, output, events = sim(text)
    assert.are.equal(0, status, output)
    local per, steps = summary(events).per_learner, {}
    local total, differ = 0, false
    for m = 1, 3 do
      steps[m] = per[m].steps
      total = total + steps[m]
      differ = differ or steps[m] ~= STEPS
    end
    -- no island steps in lockstep at the nominal time any more; on the whole about as many
    assert.is_true(differ, "with jitter 0.5 some island's steps differ from " .. STEPS .. ": " .. table.concat(steps, ", "))
    assert.is_true(math.abs(total - 3 * STEPS) <= 0.35 * 3 * STEPS, "steps " .. table.concat(steps, ", "))
    local _, status2, output2, events2 = sim(text)
    assert.are.equal(0, status2, output2)
    for m = 1, 3 do assert.are.equal(steps[m], summary(events2).per_learner[m].steps) end
    local _, status3, output3 = sim(TINY:format([[sync = { H = 8 }, islands = { count = 3, jitter = -0.1 },]]))
    assert.are_not.equal(0, status3)
    assert.matches("islands.jitter = -0.1: expected a coefficient of variation in [0, 4]", output3, 1, true)
  end)
end)

describe("diloco-lua sim with islands.cores", function()
  it("shares the cores: all up, each island trains steps; one down for good, the others step at their own time", function()
    local isl = "islands = { count = 3, cores = 2, latency = 0, bandwidth = 'inf' },"
    local _, status, output, events = sim(TINY:format("sync = { H = 8, preset = 'decoupled' }, " .. isl))
    assert.are.equal(0, status, output)
    for m = 1, 3 do assert.are.equal(STEPS, summary(events).per_learner[m].steps) end
    -- the run spans STEPS x 1.5 s; island 3 down from 0.5 s: the others' first step takes
    -- 1.5 s (it started with three computing), every later one 1 s
    _, status, output, events = sim(TINY:format("sync = { H = 8, preset = 'decoupled' }, " .. isl
      .. " chaos = { { at = '0.5s', kill = 3, down = '100000s' } },"))
    assert.are.equal(0, status, output)
    local per = summary(events).per_learner
    local want = 1 + math.floor(STEPS * 1.5 - 1.5 + 1e-9)
    assert.are.equal(want, per[1].steps)
    assert.are.equal(want, per[2].steps)
    assert.are.equal(0, per[3].steps)
    local _, status3, output3 = sim(TINY:format("sync = { H = 8 }, islands = { count = 3, cores = 0 },"))
    assert.are_not.equal(0, status3)
    assert.matches("islands.cores = 0", output3, 1, true)
  end)
end)

describe("diloco-lua sim with islands.stop = \"steps\"", function()
  it("stops each island when its schedule reaches steps and ends the run then, as run does", function()
    local isl = "islands = { count = 3, cores = 2, latency = 0, bandwidth = 'inf', stop = '%s' },"
      .. " chaos = { { at = '0.5s', kill = 3, down = '100000s' } },"
    -- island 3 down for good: the others step 1 s alone (1.5 s the first); at the horizon
    -- (STEPS x 1.5 s) they train more than STEPS steps, with stop = "steps" exactly STEPS
    -- and the run ends at 1.5 + (STEPS - 1) s
    local _, status, output, events = sim(TINY:format("sync = { H = 8, preset = 'decoupled' }, "
      .. isl:format("steps")))
    assert.are.equal(0, status, output)
    local s = summary(events)
    assert.are.equal(STEPS, s.per_learner[1].steps)
    assert.are.equal(STEPS, s.per_learner[2].steps)
    assert.is_true(math.abs(s.virtual_s - (STEPS + 0.5)) < 1e-6, "virtual_s " .. s.virtual_s)
    assert.is_true(s.per_learner[1].account.done < 1e-9, "stopped at the end: done early 0")
    local _, status2, output2, events2 = sim(TINY:format("sync = { H = 8, preset = 'decoupled' }, "
      .. isl:format("horizon")))
    assert.are.equal(0, status2, output2)
    assert.is_true(summary(events2).per_learner[1].steps > STEPS, "at the horizon, more steps")
    -- the learning rate follows the schedule step: island 3, back after 4 s, trains at the
    -- others' rate of the same schedule step (its own count is behind)
    local cosine = TINY:gsub("warmup = 2", "warmup = 2, schedule = 'cosine', min_lr = 3e-4")
    local back = "islands = { count = 3, cores = 2, latency = 0, bandwidth = 'inf', stop = 'steps' },"
      .. " chaos = { { at = '0.5s', kill = 3, down = '4s' } },"
    local _, status3, output3, events3 = sim(cosine:format("sync = { H = 8, preset = 'decoupled' }, " .. back))
    assert.are.equal(0, status3, output3)
    local lr1, compared = {}, 0
    for _, e in ipairs(of(events3, "step")) do
      if e.learner == 1 then lr1[e.schedule] = e.lr end
    end
    for _, e in ipairs(of(events3, "step")) do
      if e.learner == 3 and e.schedule > e.step and lr1[e.schedule] then
        assert.is_true(math.abs(e.lr - lr1[e.schedule]) < 1e-12, "schedule step " .. e.schedule)
        compared = compared + 1
      end
    end
    assert.is_true(compared > 0, "island 3 rejoined ahead of its own count")
    local _, status4, output4 = sim(TINY:format("sync = { H = 8 }, islands = { count = 3, stop = 'never' },"))
    assert.are_not.equal(0, status4)
    assert.matches('islands.stop = "never"', output4, 1, true)
  end)
end)

describe("diloco-lua sim with a pause", function()
  it("stops the island where it is for the pause, the syncer times it out, and it goes on with its state", function()
    local isl = "islands = { count = 3, latency = 0, bandwidth = 'inf', timeout = '2s' },"
      .. " chaos = { { at = '5s', pause = 2, down = '5s' } },"
    local _, status, output, events = sim(TINY:format("sync = { H = 8, preset = 'decoupled' }, " .. isl))
    assert.are.equal(0, status, output)
    local s = summary(events)
    -- paused 5 s of a run of STEPS 1-second steps: it trains 5 fewer, no restart
    assert.are.equal(STEPS, s.per_learner[1].steps)
    assert.are.equal(STEPS - 5, s.per_learner[2].steps)
    assert.is_true(math.abs(s.per_learner[2].down - 5 / STEPS) < 1e-9, "paused time is down time")
    local begins, ends, lost, joined = 0, 0, 0, 0
    for _, e in ipairs(of(events, "fault")) do
      if e.kind == "pause" then
        assert.are.equal(2, e.learner)
        assert.is_nil(e.optimizer, "a pause keeps the optimizer")
        if e.begin then begins = begins + 1; assert.are.equal(5, e.virtual_s)
        else ends = ends + 1; assert.are.equal(10, e.virtual_s) end
      elseif e.kind == "lost" and e.learner == 2 then
        lost = lost + 1
        assert.is_true(e.virtual_s > 5 and e.virtual_s < 10, "timed out during the pause: " .. e.virtual_s)
      elseif e.kind == "joined" and e.learner == 2 then
        joined = joined + 1
      end
    end
    assert.are.same({ 1, 1, 1, 1 }, { begins, ends, lost, joined })
    local _, status2, output2 = sim(TINY:format("sync = { H = 8 }, islands = { count = 3, timeout = '1s' },"))
    assert.are.equal(2, status2, output2)
    assert.matches("islands.timeout = 1s: expected more than the run's step time (1s)", output2, 1, true)
    local _, status3, output3 = sim(TINY:format("sync = { H = 8 }, islands = { count = 3, timeout = 'soon' },"))
    assert.are.equal(2, status3, output3)
    assert.matches('islands.timeout = "soon"', output3, 1, true)
  end)
end)

describe("diloco-lua sim with the recipe's own sync schedule", function()
  it("sends the fragments sync.schedule returns, after the steps it names", function()
    -- fragment 1 after every 5th step of each island, fragment 2 never (but at the flush)
    local _, status, output, events = sim(recipe([[preset = 'diloco', fragments = 2, quorum = 'all',
      schedule = function(learner, step, fragments)
        assert(fragments == 2)
        if step % 5 == 0 then return { 1 } end
      end]]))
    assert.are.equal(0, status, output)
    local merges = of(events, "merge")
    assert.is_true(#merges >= STEPS // 5 - 1, "merges: " .. #merges)
    for _, m in ipairs(merges) do
      assert.are.equal(1, m.fragment, "only fragment 1 is scheduled")
      for _, c in ipairs(m.contributors) do assert.are.equal(5, c.steps) end
    end
  end)

  it("stops with exit 1 naming the function when it returns something other than a list", function()
    local _, status, output, events = sim(recipe([[preset = 'diloco', fragments = 2,
      schedule = function() return "abc" end]]))
    assert.are.equal(1, status, output)
    assert.matches('sync.schedule(1, 1) returned "abc" (a string): expected a list of fragments in [1, 2]', output, 1,
      true)
    assert.matches("returned", summary(events).error, 1, true)
  end)

  it("warns when it never returns a fragment (nothing merged), in the output and the summary", function()
    local _, status, output, events = sim(recipe([[preset = 'diloco', fragments = 2,
      schedule = function() return nil end]]))
    assert.are.equal(0, status, output)
    assert.matches("warning: sync.schedule returned no fragment after any step", output, 1, true)
    local s = summary(events)
    assert.are.equal(0, s.goodput)
    assert.matches("no fragment after any step", s.warnings[1], 1, true)
  end)

  it("stops with exit 1 naming the function when it returns a fragment that does not exist", function()
    local _, status, output = sim(recipe([[preset = 'diloco', fragments = 2,
      schedule = function() return { 3 } end]]))
    assert.are.equal(1, status, output)
    assert.matches("sync.schedule(1, 1) returned fragment 3: expected integers in [1, 2]", output, 1, true)
  end)
end)

describe("diloco-lua sim refuses bad input with exit 2", function()
  local cases = {
    { "a kill of a learner that does not exist", recipe("", "", "chaos = { { at = '10s', kill = 5, down = '8s' } },"),
      "chaos[1].kill = 5: expected a learner index in [1, 3] (islands.count = 3)" },
    { "more fragments than tensors", recipe("fragments = 1000"), "sync.fragments = 1000 but the model has " },
    { "tau >= H", recipe("tau = 8"), "sync.tau = 8: the overlap must be below sync.H = 8" },
    { "a quorum above the learners", recipe("quorum = 5"),
      "sync.quorum = 5 but islands.count = 3: quorum must be <= the number of learners" },
    { "a speed of 0", recipe("", "speed = 0"), "islands.speed = 0: expected a finite number > 0" },
    { "a malformed duration", recipe("", "step_time = '10 parsecs'"),
      'islands.step_time = "10 parsecs": expected a duration such as "20s", "250ms", "5m"' },
    { "dp with chaos", recipe("preset = 'dp', H = 1", "", "chaos = { { at = '10s', kill = 2, down = '8s' } },"),
      'chaos with sync.preset = "dp": faults in data parallel are not simulated in this version (the goodput '
      .. "simulator, diloco-lua goodput, models them)" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local _, status, output = sim(c[2])
      assert.are.equal(2, status, output)
      assert.matches(c[3], output, 1, true)
    end)
  end
  it("--resume latest", function()
    local _, status, output = sim(recipe(""), "--resume latest")
    assert.are.equal(2, status, output)
    assert.matches("--resume: a sim run is not resumed", output, 1, true)
  end)
end)

teardown(scratch.cleanup)

describe("diloco-lua sim when a recipe function fails", function()
  -- Seen: hook errors printed a traceback into lua/ without --debug; a quorum function
  -- failing at the start left no summary and no metrics.
  it("names the hook and the recipe's line, with no traceback unless --debug", function()
    local text = recipe("", "", "hooks = { on_merge = function(info) error('hook boom') end },")
    local _, status, output, events = sim(text)
    assert.are.equal(1, status, output)
    assert.matches("hooks.on_merge failed: [^\n]*r%d+%.lua:%d+: hook boom", output)
    assert.is_nil(output:find("stack traceback", 1, true), output)
    assert.matches("hooks.on_merge failed", summary(events).error, 1, true)
    _, status, output = sim(text, "--debug")
    assert.are.equal(1, status, output)
    assert.matches("stack traceback", output, 1, true)
  end)

  it("stops at the first SIGTERM while an endless hook runs, as for a signal between steps", function()
    -- the hook says when it is in its loop (a file), and the signal goes then
    local mark = tmp .. "/in-endless-hook"
    local path = write("endless.lua", recipe("", "", string.format("hooks = { on_step = function(info) if info.step "
      .. ">= 2 then io.open(%q, 'w'):close() while true do end end end },", mark)))
    local out = tmp .. "/endless"
    local t0 = diloco.clock()
    local output = sh(string.format("%s sim %s --out %s --quiet > %s/endless.log 2>&1 & pid=$!; n=0; "
      .. "while [ ! -e %s ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; "
      .. "kill -TERM $pid; wait $pid; echo \"status=$? waited=$n\"", exe, path, out, tmp, mark))
    assert.matches("status=143", output, 1, true)
    assert.is_true(diloco.file_id(mark) ~= nil, "the hook was entered: " .. output)
    assert.is_true(diloco.clock() - t0 < 30, "it stopped at the first signal")
    local lines = read_lines(out .. "/metrics.jsonl")
    local s = assert(diloco.json_decode(lines[#lines]))
    assert.are.equal("summary", s.event)
    assert.are.equal("SIGTERM", s.signal)
    assert.is_true(s.interrupted)
    assert.is_nil(s.error)
  end)

  it("writes a summary when the quorum function fails at the start, and the next run takes the directory over",
    function()
      local out, status, output, events = sim(recipe("quorum = function(live) error('quorum boom') end"))
      assert.are.equal(1, status, output)
      assert.matches("hooks.sync.quorum failed: [^\n]*quorum boom", output)
      assert.are.equal(1, #events, output)
      local s = summary(events)
      assert.are.equal("start", s.failed_at)
      assert.matches("quorum boom", s.error, 1, true)
      local path = write("fixed.lua", recipe(""))
      local again, st2 = sh(string.format("%s sim %s --out %s", exe, path, out))
      assert.are.equal(0, st2, again)
      assert.matches("took over " .. out, again, 1, true)
      -- a run that trained is not taken over, and sim's refusal offers no --resume (it has none)
      again, st2 = sh(string.format("%s sim %s --out %s", exe, path, out))
      assert.are.equal(2, st2, again)
      assert.matches("already holds a run", again, 1, true)
      assert.is_nil(again:find("--resume", 1, true), again)
    end)
end)

describe("diloco-lua sim with many islands, all built in one process", function()
  local big = "recipes/decoupled.lua" -- charlm's model (specs run from the source tree)
  -- Seen: 64 islands of a 512-dim model grew to 14.6 GB before failing after 160 s.
  it("refuses islands that cannot fit in memory before building the second, saying what they need", function()
    local out = tmp .. "/toobig"
    local t0 = diloco.clock()
    local output, status = sh(string.format("%s sim %s --out %s --quiet --set islands.count=64 --set model.dim=1024 "
      .. "--set model.layers=4 --set model.heads=8 --set steps=5", exe, big, out))
    assert.are.equal(2, status, output)
    assert.matches("islands.count = 64 islands of [%d.]+M parameters need about [%d.]+ GB of memory", output)
    assert.matches("more than the [%d.]+ [GM]B available: fewer islands or a smaller model", output)
    assert.is_true(diloco.clock() - t0 < 60, "refused at once")
    local lines = read_lines(out .. "/metrics.jsonl")
    assert.matches('"failed_at":"start"', lines[#lines], 1, true)
  end)

  -- Seen: the same ignored SIGTERM while it built the islands.
  it("stops at a SIGTERM while it builds the islands, with its exit status and a summary", function()
    local out = tmp .. "/building"
    -- the metrics file is opened before the islands are built: the signal goes once it is there
    local output = sh(string.format("%s sim %s --out %s --quiet --set islands.count=64 --set steps=5 > %s/building.log "
      .. "2>&1 & pid=$!; n=0; while [ ! -e %s/metrics.jsonl ] && [ $n -lt 1200 ]; do sleep 0.02; n=$((n+1)); done; "
      .. "kill -TERM $pid; wait $pid; echo \"status=$?\"; cat %s/building.log", exe, big, out, tmp, out, tmp))
    assert.matches("status=143", output, 1, true)
    assert.matches("stopped by SIGTERM while building island %d+ of 64", output)
    local lines = read_lines(out .. "/metrics.jsonl")
    local s = assert(diloco.json_decode(lines[#lines]))
    assert.are.equal("SIGTERM", s.signal)
    assert.is_true(s.interrupted)
    assert.are.equal(0, s.steps)
  end)
end)
