-- Links of the real runtime (docs/runtime.md, "Links"): a learner's link emulated both
-- ways on the syncer's side (diloco.Syncer:shape, :cut over dlc_srt_shape, dlc_srt_cut),
-- the recipe's islands latency / bandwidth under run, and chaos cut and link events on
-- learner processes.  The drivers in one process first (a capped link measured), then a
-- run of two learner processes; every test kills only the pids it started.
local H = require "spec.helpers"
local events, of_kind = H.events, H.of_kind
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"

-- A syncer and one learner in this process over loopback, on a model of n floats in
-- two fragments.
local function pair(n, opts)
  opts = opts or {}
  local function model()
    return diloco.Params { { "a", diloco.full({ n // 2 }, 0.5) }, { "b", diloco.full({ n - n // 2 }, -0.25) } }
  end
  local ps, pl = model(), model()
  local plan_s, plan_l = diloco.Plan(ps, { fragments = 2 }), diloco.Plan(pl, { fragments = 2 })
  local net = { insecure = true, heartbeat = 0.2, timeout = 3, reconnect_min = 0.05, reconnect_max = 0.2 }
  local s = assert(diloco.Syncer { params = ps, plan = plan_s, learners = 1, listen = "127.0.0.1:0", run = "links",
    net = net, learner = { H = 1000, tau = 0 }, syncer = { quorum = 1 } })
  if opts.shape then s:shape(1, opts.shape[1], opts.shape[2]) end
  -- (joined on return: the whole model came down; the seconds that took are the 4th value)
  local t0 = diloco.clock()
  local l = assert(diloco.Learner { params = pl, plan = plan_l, connect = "127.0.0.1:" .. s:port(), id = 1,
    run = "links", net = net, learner = { H = 1000, tau = 0 } })
  return s, l, { ps, pl, plan_s, plan_l }, diloco.clock() - t0
end

local function close(s, l, keep)
  l:close()
  s:close()
  for _, x in ipairs(keep) do x:close() end
end

describe("a learner's link shaped on the syncer's side", function()
  local N = 500000 -- floats: 2 MB of model, 1 MB a fragment

  it("caps the whole model on the way down and a contribution on the way up, within a band of the rate", function()
    local rate = 1e6
    local s, l, keep, down = pair(N, { shape = { rate, 0 } })
    local info = s:learner(1)
    assert.are.equal(rate, info.rate)
    assert.are.equal(0, info.latency)
    local bytes = 4 * N
    local bps = bytes / down
    assert.is_true(bps > 0.6 * rate and bps < 1.15 * rate,
      string.format("whole model (%d bytes) in %.2f s: %.3g bytes/s, cap %.3g", bytes, down, bps, rate))
    -- up: one fragment's contribution, merged once all of it is through
    l:step_done(100, 0.01)
    local t0 = diloco.clock()
    l:contribute(1)
    local merged
    while not merged and diloco.clock() - t0 < 20 do
      local ev = s:poll(0.05)
      if ev and ev.type == "merged" then merged = diloco.clock() - t0 end
    end
    assert.is_number(merged, "the contribution was merged")
    local up = 4 * (N // 2) / merged
    assert.is_true(up > 0.6 * rate and up < 1.15 * rate,
      string.format("a fragment's contribution (%d bytes) in %.2f s: %.3g bytes/s, cap %.3g", 4 * (N // 2), merged,
        up, rate))
    close(s, l, keep)
  end)

  it("leaves an unshaped link at loopback speed", function()
    local s, l, keep, dt = pair(N)
    assert.is_true(dt < 1.0, string.format("whole model in %.2f s unshaped", dt))
    close(s, l, keep)
  end)

  it("refuses a bad bandwidth, latency, cut or learner, naming it", function()
    local s, l, keep = pair(1000)
    assert.is_true(l:join(30))
    local ok, err = pcall(s.shape, s, 1, 10, 0)
    assert.is_false(ok)
    assert.matches("bandwidth = 10 bytes/s: expected 0 (no cap) or >= 1000", err, 1, true)
    -- a learner's join deadline, checked before it connects
    local okj, errj = pcall(diloco.Learner, { params = keep[2], plan = keep[4], connect = "127.0.0.1:" .. s:port(),
      id = 1, run = "links", net = { insecure = true }, learner = { H = 1000, tau = 0 }, join_timeout = 0 })
    assert.is_false(okj)
    assert.matches("join_timeout must be a finite number of seconds > 0", errj, 1, true)
    ok, err = pcall(s.shape, s, 1, 0, 90)
    assert.matches("latency = 90 s: expected 0..60", err, 1, true)
    ok, err = pcall(s.cut, s, 1, -1)
    assert.matches("seconds = -1: expected > 0", err, 1, true)
    ok, err = pcall(s.shape, s, 2, 0, 0)
    assert.matches("learner out of range", err, 1, true)
    close(s, l, keep)
  end)

  it("refuses a bad start gate, naming it", function()
    local ps = diloco.Params { { "a", diloco.full({ 8 }, 0.5) } }
    local plan = diloco.Plan(ps, { fragments = 1 })
    local function syncer(extra)
      local o = { params = ps, plan = plan, learners = 2, listen = "127.0.0.1:0", run = "gate",
        net = { insecure = true } }
      for k, v in pairs(extra) do o[k] = v end
      return pcall(diloco.Syncer, o)
    end
    local ok, err = syncer { start_learners = 3 }
    assert.is_false(ok)
    assert.matches("start_learners must be an integer in 0..2", err, 1, true)
    ok, err = syncer { start_learners = 2, start_timeout = -1 }
    assert.is_false(ok)
    assert.matches("start_timeout must be a finite number of seconds >= 0", err, 1, true)
    ok, err = syncer { start_learners = 2, start_timeout = math.huge }
    assert.is_false(ok)
    assert.matches("start_timeout", err, 1, true)
    ok, err = syncer { refusals_every = 0 }
    assert.is_false(ok)
    assert.matches("refusals_every must be a finite number of seconds > 0", err, 1, true)
    ok, err = syncer { refusals_every = "soon" }
    assert.is_false(ok)
    assert.matches("refusals_every must be a finite number of seconds > 0", err, 1, true)
    local made, s = syncer { start_learners = 2, start_timeout = 5 }
    assert.is_true(made, s)
    s:close()
    plan:close()
    ps:close()
  end)
end)

describe("recipe links and chaos link events", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  local function recipe(name, islands, chaos)
    return S.write(name .. ".lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.text { path = "/usr/share/games/fortunes", ctx = 16, batch = 4 },
  islands = %s, steps = 20, chaos = %s,
}
]], islands, chaos or "nil"))
  end

  it("refuses a link the runtime cannot make and a malformed link event, naming the field", function()
    local out, code = H.sh(string.format("%s run %s --out %s/r 2>&1", exe,
      recipe("slow", '{ { bandwidth = 100 }, {} }'), S.dir))
    assert.are.equal(2, code, out)
    assert.matches('islands[1].bandwidth = 100: expected at least 1000 bytes/s', out, 1, true)
    out, code = H.sh(string.format("%s run %s --out %s/r 2>&1", exe,
      recipe("far", '{ count = 2, latency = "2m" }'), S.dir))
    assert.are.equal(2, code, out)
    assert.matches('islands.latency = "2m": expected at most 60 s', out, 1, true)
    out, code = H.sh(string.format("%s run %s --out %s/r 2>&1", exe,
      recipe("ev", '{ count = 2 }', '{ { at = "1s", link = 2 }, { at = "2s", link = 3, latency = "x" } }'), S.dir))
    assert.are.equal(2, code, out)
    assert.matches("chaos[1]: a link event sets bandwidth, latency or both", out, 1, true)
    assert.matches("chaos[2].link = 3: expected a learner index in [1, 2]", out, 1, true)
    assert.matches('chaos[2].latency = "x": expected a duration', out, 1, true)
  end)

  it("run under sim too: the island's link changes for the event's duration", function()
    local function sim(name, chaos)
      local out, code = H.sh(string.format("%s sim %s --out %s/%s 2>&1", exe,
        recipe(name, '{ count = 2, step_time = "1s" }', chaos), S.dir, name))
      assert.are.equal(0, code, out)
      return events(S.dir .. "/" .. name .. "/metrics.jsonl")
    end
    local ev = sim("simlink", '{ { at = "3s", link = 2, latency = "4s", bandwidth = "1MB/s", duration = "8s" } }')
    local f = of_kind(ev, "fault")
    assert.are.equal(2, #f)
    assert.are.same({ "link", 2, true, 4.0, 1e6, 8.0, 3.0 },
      { f[1].kind, f[1].learner, f[1].begin, f[1].latency, f[1].bandwidth, f[1].duration, f[1].virtual_s })
    -- back to the islands' defaults (20 ms, 2.5 Gbps) at its end
    assert.are.same({ "link", 2, false, 0.02, 2.5e9 / 8, 11.0 },
      { f[2].kind, f[2].learner, f[2].begin, f[2].latency, f[2].bandwidth, f[2].virtual_s })
    -- what learner 2 sent meanwhile came 4 s late: the run is not the one without the event
    local plain = sim("plain", "nil")
    assert.are_not.equal(H.summary_of(plain).final_eval_loss, H.summary_of(ev).final_eval_loss)
  end)

  it("give sim's islands fields, and the runtime a link only where the recipe set one", function()
    local r = assert(diloco.recipe.validate(diloco.recipe {
      model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
      data = { kind = "synthetic_text", ctx = 16 },
      islands = { { latency = "50ms" }, { bandwidth = "20Mbps" }, {} },
    }))
    assert.are.same({ { latency = 0.05 }, { bandwidth = 2.5e6 }, {} }, r.islands.links)
    assert.are.equal(0.02, r.islands.list[3].latency) -- sim's default stays
    -- the runtime emulates them only when asked (runtime.emulate_links): real links are real
    local cluster = require "diloco.cluster"
    assert.are.same({ 0, 0 }, { cluster.link_of({ recipe = r }, 1) })
    r.runtime.emulate_links = true
    assert.are.same({ 0, 0.05 }, { cluster.link_of({ recipe = r }, 1) })
    assert.are.same({ 2.5e6, 0 }, { cluster.link_of({ recipe = r }, 2) })
    r.runtime.emulate_links = false
    -- validated again (OUT/recipe.json): the same links, not sim's defaults made links
    local again = assert(diloco.recipe.validate(diloco.recipe {
      model = r.model, data = { kind = "synthetic_text", ctx = 16 }, islands = r.islands }))
    assert.are.same({ { latency = 0.05 }, { bandwidth = 2.5e6 }, {} }, again.islands.links)
    -- through OUT/recipe.json, where math.huge is "inf"
    local inf = assert(diloco.recipe.validate(diloco.recipe {
      model = r.model, data = { kind = "synthetic_text", ctx = 16 }, islands = { count = 2, bandwidth = "inf" } }))
    local json = diloco.json_encode(diloco.recipe_json.effective(inf.islands))
    local back = assert(diloco.recipe.validate(diloco.recipe {
      model = r.model, data = { kind = "synthetic_text", ctx = 16 }, islands = diloco.json_decode(json) }))
    assert.are.same({ { bandwidth = math.huge }, { bandwidth = math.huge } }, back.islands.links)
    local none = assert(diloco.recipe.validate(diloco.recipe {
      model = r.model, data = { kind = "synthetic_text", ctx = 16 }, islands = { count = 2 } }))
    assert.is_false(none.islands.links)
    assert.is_false(assert(diloco.recipe.validate(diloco.recipe {
      model = r.model, data = { kind = "synthetic_text", ctx = 16 }, islands = none.islands })).islands.links)
  end)
end)

describe("diloco-lua run with chaos cut and link events", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("times a cut learner out, rejoins it after the cut, and shapes a link for a while", function()
    local at = sanitized and 4 or 2
    local path = S.write("cut.lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = "cut",
  model = { arch = "gpt", vocab = 256, ctx = 32, dim = 64, layers = 2, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 32, batch = 8 },
  sync = { preset = "decoupled", H = 32, fragments = 2, tau = 1 },
  islands = { count = 2, latency = "5ms" },
  runtime = { heartbeat = "0.5s", timeout = "2s", drain = "10s", emulate_links = true },
  steps = %d,
  eval = { every = 0, batches = 4 },
  chaos = { { at = %d, cut = 2, down = "3s" }, { at = %d, link = 1, latency = "100ms", bandwidth = "50MB/s",
    duration = "2s" } },
}
]], sanitized and 1800 or 6000, at, at))
    local out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local cuts = of_kind(ev, "fault", "cut")
    assert.are.equal(2, #cuts, "the cut's begin and end")
    assert.is_true(cuts[1].begin and not cuts[2].begin)
    assert.are.equal(2, cuts[1].learner)
    assert.is_true(cuts[2].wall_s - cuts[1].wall_s >= 2.9, "the cut lasted its 3 s")
    -- the syncer timed learner 2 out during the cut (2 s of silence)
    local lost
    for _, f in ipairs(of_kind(ev, "fault", "lost")) do
      if f.learner == 2 and f.detected_s >= cuts[1].wall_s and f.detected_s <= cuts[2].wall_s then lost = f end
    end
    assert.is_table(lost, "learner 2 lost during the cut")
    assert.is_true(lost.detected_s - cuts[1].wall_s >= 1.0, "lost by the timeout, not at once")
    -- nothing of learner 2 merged during the cut (after what was under way at its start)
    for _, m in ipairs(of_kind(ev, "merge")) do
      if m.wall_s > cuts[1].wall_s + 0.5 and m.wall_s < cuts[2].wall_s - 0.1 then
        for _, c in ipairs(m.contributors) do assert.are_not.equal(2, c.learner, "merged during the cut") end
      end
    end
    -- back after it: joined, then its contributions merged again
    local joined
    for _, f in ipairs(of_kind(ev, "fault", "joined")) do
      if f.learner == 2 and f.wall_s >= cuts[2].wall_s - 0.1 then joined = joined or f end
    end
    assert.is_table(joined, "learner 2 joined again after the cut")
    assert.are.equal("cut", joined.cause)
    local rec
    for _, f in ipairs(of_kind(ev, "fault", "recovered")) do
      if f.learner == 2 and f.cause == "cut" then rec = f end
    end
    assert.is_table(rec, "its first contribution merged after the cut")
    local after = 0
    for _, m in ipairs(of_kind(ev, "merge")) do
      if m.wall_s >= rec.wall_s then
        for _, c in ipairs(m.contributors) do after = after + (c.learner == 2 and 1 or 0) end
      end
    end
    assert.is_true(after >= 1, "learner 2 contributes after the cut")
    -- the link change and its end, each a fault event naming the link it left
    local links = of_kind(ev, "fault", "link")
    assert.are.equal(2, #links)
    assert.is_true(links[1].begin)
    assert.are.equal(1, links[1].learner)
    assert.are.equal(0.1, links[1].latency)
    assert.are.equal(5e7, links[1].bandwidth)
    assert.is_false(links[2].begin)
    assert.are.equal(0.005, links[2].latency) -- back to the recipe's
    assert.are.equal(0, links[2].bandwidth) -- no cap given
    local s = ev[#ev]
    assert.are.equal("summary", s.event)
    assert.is_nil(s.error)
    assert.is_true(s.per_learner[2].joins >= 2, "learner 2 joined twice")
  end)
end)
