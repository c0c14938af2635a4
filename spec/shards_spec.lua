-- A sharded syncer under a launcher (docs/shards.md): `diloco-lua syncer RECIPE --shard I/S`
-- processes and learners given every shard's address file (`--connect @A,@B`).  Each shard
-- merges its own fragments only, from every learner; shard 1 assembles the run's global
-- model from both shards' fragments, evaluates it and saves it in OUT; a shard killed with
-- SIGKILL and restarted with --resume takes the learners back while they train on; bad
-- shard options and a learner given one shard's address are refused, named.  Every test
-- kills only the pids it started.
local H = require "spec.helpers"
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end

local function recipe(S, steps)
  return H.tiny_recipe(S, "shards", { count = 3, steps = steps,
    sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
    runtime = { timeout = "3s", join_timeout = "60s" } })
end

-- Starts shard i of 2 (extra: more arguments); returns its pid.
local function shard(S, path, i, extra, listen)
  local args = { exe, "syncer", path, "--shard", i .. "/2", "--listen", listen or "127.0.0.1:0", "--address-file",
    S.dir .. "/addr" .. i, "--secret-file", S.dir .. "/secret", "--out", S.dir .. "/run", "--quiet",
    stdout = S.dir .. "/shard" .. i .. ".log", stderr = S.dir .. "/shard" .. i .. ".log", parent_death = "KILL" }
  for _, a in ipairs(extra or {}) do table.insert(args, #args + 1, a) end
  return assert(diloco.proc.spawn(args))
end

local function learner(S, path, m, connect)
  local log = S.dir .. "/l" .. m .. ".log"
  return assert(diloco.proc.spawn { exe, "learner", path, "--connect", connect or ("@" .. S.dir .. "/addr1,@" ..
    S.dir .. "/addr2"), "--id", tostring(m), "--secret-file", S.dir .. "/secret", "--out", S.dir .. "/run/learner-" .. m,
    "--overwrite", "--quiet", stdout = log, stderr = log, env = { OMP_NUM_THREADS = "1" }, parent_death = "KILL" })
end

-- The fragments merged and the learners that contributed, in a shard's metrics.
local function merges_of(path)
  local frags, learners, n = {}, {}, 0
  for _, e in ipairs(H.events(path)) do
    if e.event == "merge" then
      n = n + 1
      frags[e.fragment] = true
      for _, c in ipairs(e.contributors) do learners[c.learner] = true end
    end
  end
  return frags, learners, n
end

local function log(S, name) return table.concat(H.read_lines(S.dir .. "/" .. name .. ".log"), "\n") end

-- A scratch directory with the recipe of `steps` and the run's secret: S, the recipe's path.
local function fresh(steps)
  local S = H.scratch()
  local path = recipe(S, steps)
  S.write("secret", "sh4rd\n")
  return S, path
end

describe("a sharded syncer under a launcher", function()
  it("merges each fragment at its owner and assembles the global model from both shards", function()
    local S, path = fresh(200)
    local pids = { shard(S, path, 1), shard(S, path, 2) }
    for m = 1, 3 do pids[#pids + 1] = learner(S, path, m) end
    local codes = H.wait_all(pids, 120)
    for i, c in ipairs(codes) do
      assert.are.same({ exited = 0 }, c, log(S, i <= 2 and ("shard" .. i) or ("l" .. (i - 2))))
    end
    -- the deal: the model's plan, dealt to 2 shards
    local r = dofile(path)
    local model = require("diloco.island").build_model(r.model, r.seed)
    local plist = model:parameters()
    local owner = diloco.Plan(diloco.Params(plist), { fragments = 4 }):deal(2)
    for k = 1, 2 do
      local frags, learners, n = merges_of(S.dir .. "/run/shard-" .. k .. "/metrics.jsonl")
      assert.is_true(n > 0)
      for f = 1, 4 do assert.are.equal(owner[f] == k, frags[f] == true, "fragment " .. f .. " at shard " .. k) end
      for m = 1, 3 do assert.is_true(learners[m], "learner " .. m .. " merged at shard " .. k) end
    end
    -- shard 1's summary: the assembled model, evaluated; shard 2's: its part
    local s1 = H.summary_of(H.events(S.dir .. "/run/shard-1/metrics.jsonl"))
    local s2 = H.summary_of(H.events(S.dir .. "/run/shard-2/metrics.jsonl"))
    assert.are.equal("1/2", s1.shard)
    assert.are.equal("2/2", s2.shard)
    assert.are.equal(S.dir .. "/run/model.safetensors", s1.assembled)
    assert.is_number(s1.final_eval_loss)
    -- the run's tape in its root: both shards' merges in time order, then the run's summary
    local root_ev = H.events(S.dir .. "/run/metrics.jsonl")
    local n_by, last_t = { 0, 0 }, 0
    for _, e in ipairs(root_ev) do
      if e.event == "merge" then
        n_by[e.shard] = n_by[e.shard] + 1
        assert.is_true(e.time >= last_t, "the run's tape in time order")
        last_t = e.time
      end
    end
    assert.are.same({ s1.merges, s2.merges }, n_by)
    local rs = H.summary_of(root_ev)
    assert.are.equal(s1.merges + s2.merges, rs.merges)
    assert.are.equal(s1.bytes_up + s2.bytes_up, rs.bytes_up)
    assert.are.equal(2, rs.shards)
    assert.are.equal(S.dir .. "/run/model.safetensors", rs.assembled)
    -- what `compare` shows of the run (its root): those counts
    local ctext, ccode = H.sh(string.format("%s compare %s/run", exe, S.dir))
    assert.are.equal(0, ccode, ctext)
    assert.matches("decoupled%s+3%s+[%d.]+%s+[%d.]+%%%s+[%d.]+%%%s+[%d.%-]+%%?%s+" .. (s1.merges + s2.merges), ctext)
    -- sim --replay of the run's root: every shard's tape, the assembled model bit for bit
    local rtext, rcode = H.sh(string.format("%s sim --replay %s/run", exe, S.dir))
    assert.are.equal(0, rcode, rtext)
    assert.matches("bit for bit", rtext, 1, true)
    -- shard 1's summary carries shard 2's own
    assert.are.equal(1, #s1.shard_summaries)
    assert.are.equal(2, s1.shard_summaries[1].shard)
    assert.are.equal(s2.merges, s1.shard_summaries[1].merges)
    -- and the run's totals: both shards' counts added up
    assert.are.equal(2, s1.run.shards)
    assert.are.equal(s1.merges + s2.merges, s1.run.merges)
    assert.are.equal(s1.bytes_up + s2.bytes_up, s1.run.bytes_up)
    assert.are.equal(s1.bytes_down + s2.bytes_down, s1.run.bytes_down)
    assert.is_true(math.abs(s1.useful_tokens + s2.useful_tokens - s1.run.useful_tokens) < 1e-6)
    assert.is_true(s1.goodput > 0 and s2.goodput > 0)
    -- the run's goodput: every shard's useful tokens over shard 1's capacity
    local capacity = s1.useful_tokens / s1.goodput
    assert.is_true(math.abs((s1.useful_tokens + s2.useful_tokens) / capacity - s1.run.goodput) < 1e-9)
    assert.is_nil(s2.run)
    -- per learner: its merged contributions and bytes over both shards (the root tape's rows too)
    for m = 1, 3 do
      for _, key in ipairs { "merged", "bytes_up", "bytes_down" } do
        local want = s1.per_learner[m][key] + s2.per_learner[m][key]
        assert.are.equal(want, s1.run.per_learner[m][key], key .. " of learner " .. m)
        assert.are.equal(want, rs.per_learner[m][key], key .. " of learner " .. m .. " on the root tape")
      end
      assert.are.equal(s1.per_learner[m].steps, rs.per_learner[m].steps)
    end
    assert.is_true(s2.final_eval_loss == nil or s2.final_eval_loss == diloco.json_null) -- (part of a model)
    -- the assembled model holds each fragment as its owner saved it, bit for bit
    local function arena(file)
      local t = assert(diloco.load_safetensors(file))
      local list = {}
      for i, p in ipairs(plist) do list[i] = { p[1], assert(t[p[1]], p[1]) } end
      return diloco.Params(list)
    end
    local whole = arena(S.dir .. "/run/model.safetensors")
    local plan = diloco.Plan(whole, { fragments = 4 })
    local parts = { arena(S.dir .. "/run/shard-1/model.safetensors"), arena(S.dir .. "/run/shard-2/model.safetensors") }
    local init = diloco.Params(require("diloco.island").build_model(r.model, r.seed):parameters())
    for f = 1, 4 do
      for _, v in ipairs(plan:views(f)) do
        local a = whole:flat():slice(1, v.offset + 1, v.offset + v.numel):tolist()
        local b = parts[owner[f]]:flat():slice(1, v.offset + 1, v.offset + v.numel):tolist()
        local c = init:flat():slice(1, v.offset + 1, v.offset + v.numel):tolist()
        assert.are.same(b, a, "fragment " .. f .. " view " .. v.name)
        assert.are_not.same(c, a, "fragment " .. f .. " moved from the initial model")
      end
    end
    S.cleanup()
  end)

  it("a shard killed with SIGKILL comes back with --resume while the learners train on", function()
    local S, path = fresh(6000)
    local s1, s2 = shard(S, path, 1), shard(S, path, 2)
    local ls = {}
    for m = 1, 3 do ls[m] = learner(S, path, m) end
    local m2 = S.dir .. "/run/shard-2/metrics.jsonl"
    H.await_or_kill(s2, 60, "merges at shard 2", function() return H.count_events(m2, "merge") >= 5 end)
    -- (its checkpoint of the start is there: a resume continues from it)
    diloco.proc.signal(s2, "KILL")
    diloco.proc.wait(s2, true)
    local m1 = S.dir .. "/run/shard-1/metrics.jsonl"
    local before = H.count_events(m1, "merge")
    H.await_or_kill(s1, 60, "merges at shard 1 while shard 2 is down",
      function() return H.count_events(m1, "merge") >= before + 10 end)
    -- back at its address (the learners reconnect there)
    local at = (H.read_lines(S.dir .. "/addr2")[1] or ""):match("^%s*(.-)%s*$")
    os.remove(S.dir .. "/addr2")
    s2 = shard(S, path, 2, { "--resume" }, at)
    local codes = H.wait_all({ s1, s2, ls[1], ls[2], ls[3] }, 180)
    for i, c in ipairs(codes) do
      assert.are.same({ exited = 0 }, c, log(S, ({ "shard1", "shard2", "l1", "l2", "l3" })[i]))
    end
    local ev2 = H.events(m2)
    local resumed = H.of_kind(ev2, "resume")
    assert.are.equal(1, #resumed)
    local after, by = 0, {}
    local seen_resume = false
    for _, e in ipairs(ev2) do
      if e.event == "resume" then seen_resume = true end
      if seen_resume and e.event == "merge" then
        after = after + 1
        for _, c in ipairs(e.contributors) do by[c.learner] = true end
      end
    end
    assert.is_true(after > 0)
    for m = 1, 3 do assert.is_true(by[m], "learner " .. m .. " merged at the resumed shard 2") end
    local s1 = H.summary_of(H.events(m1))
    assert.are.equal(S.dir .. "/run/model.safetensors", s1.assembled)
    assert.is_true(s1.final_eval_loss < 4, "the assembled model learned: " .. s1.final_eval_loss) -- (ln 256 = 5.5)
    S.cleanup()
  end)

  it("refuses bad shard options and a learner given one shard's address, named", function()
    local S, path = fresh(200)
    for _, case in ipairs {
      { { "--shard", "3/2", "--secret-file", S.dir .. "/secret" }, "expected I/S with 1 <= I <= S <= 16" },
      { { "--shard", "1/5", "--secret-file", S.dir .. "/secret" }, "sync.fragments = 4, fewer than 5 shards" },
      { { "--shard", "1/2" }, "the shards share the run's secret" },
    } do
      local args = { exe, "syncer", path, "--out", S.dir .. "/bad" }
      for _, a in ipairs(case[1]) do args[#args + 1] = a end
      local out, status = H.sh(table.concat(args, " "))
      assert.are.equal(2, status, out)
      assert.matches(case[2], out, 1, true)
    end
    for _, case in ipairs {
      { "islands.syncers=5", "islands.syncers = 5: expected at most sync.fragments = 4 shards" },
      { "sync.preset=dp", "data parallel has one syncer" },
    } do
      local extra = case[1] == "sync.preset=dp" and " --set islands.syncers=2" or ""
      local out, status = H.sh(string.format("%s run %s --set %s%s --out %s/bad2", exe, path, case[1], extra, S.dir))
      assert.are.equal(2, status, out)
      assert.matches(case[2], out, 1, true)
    end
    -- a learner given shard 1's address alone: refused for good, naming the shards
    local s1 = shard(S, path, 1)
    local l = learner(S, path, 1, "@" .. S.dir .. "/addr1")
    local code = H.wait_all({ l }, 60)[1]
    pcall(diloco.proc.signal, s1, "KILL")
    diloco.proc.wait(s1, true)
    assert.are.same({ exited = 1 }, code)
    assert.matches("is shard 1 of 2, but this learner was given 1 address", log(S, "l1"), 1, true)
    S.cleanup()
  end)
end)

describe("run with islands.syncers = 2", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  local function sharded_recipe(steps)
    return H.tiny_recipe(S, "sharded", { count = 3, steps = steps,
      sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
      runtime = { syncer_every = 4 } })
  end

  -- tiny_recipe has no islands.syncers field: the recipe file with it added (and chaos
  -- events, when given), as name; its path and text
  local function with_syncers(path, chaos, name)
    local f = assert(io.open(path))
    local text = f:read("a")
    f:close()
    text = text:gsub("islands = { count = 3 }", "islands = { count = 3, syncers = 2 }")
    if chaos then text = text:gsub("chaos = nil", "chaos = " .. chaos) end
    return S.write(name or "sharded2.lua", text), text
  end

  it("serves both shards in its process: each merges its fragments, one checkpoint set, replayed", function()
    local path = with_syncers(sharded_recipe(200))
    local out = S.dir .. "/run"
    local text, code = H.sh(string.format("%s run %s --out %s --quiet", exe, path, out))
    assert.are.equal(0, code, text)
    local ev = H.events(out .. "/metrics.jsonl")
    local s = H.summary_of(ev)
    assert.are.equal(2, s.syncers)
    assert.are.same({ 1, 1 }, s.epochs)
    assert.is_number(s.final_eval_loss)
    local r = dofile(path)
    local plist = require("diloco.island").build_model(r.model, r.seed):parameters()
    local owner = diloco.Plan(diloco.Params(plist), { fragments = 4 }):deal(2)
    local by_shard = { {}, {} }
    for _, e in ipairs(H.of_kind(ev, "merge")) do by_shard[e.shard][e.fragment] = true end
    for f = 1, 4 do
      assert.is_true(by_shard[owner[f]][f] == true, "fragment " .. f .. " merged by shard " .. owner[f])
      assert.is_nil(by_shard[3 - owner[f]][f], "fragment " .. f .. " not merged by the other shard")
    end
    -- each checkpoint a set: shard 1's file and shard 2's beside it
    for _, c in ipairs(diloco.rundir.checkpoints(out .. "/syncer")) do
      local side = c.path:gsub("%.safetensors$", ".shard-2.safetensors")
      local m1, m2 = diloco.safetensors_meta(c.path), diloco.safetensors_meta(side)
      assert.is_table(m2, side)
      assert.are.equal(m1["diloco.merges"], m2["diloco.merges"])
      assert.are.equal(table.concat({ owner[1] == 1 and 1 or 0, owner[2] == 1 and 1 or 0, owner[3] == 1 and 1 or 0,
        owner[4] == 1 and 1 or 0 }), m1["syncer.owns"])
      assert.are.equal(table.concat({ owner[1] == 2 and 1 or 0, owner[2] == 2 and 1 or 0, owner[3] == 2 and 1 or 0,
        owner[4] == 2 and 1 or 0 }), m2["syncer.owns"])
    end
    -- sim --replay: each shard's merges in its own order, the final model bit for bit
    text, code = H.sh(string.format("%s sim --replay %s", exe, out))
    assert.are.equal(0, code, text)
    assert.matches("bit for bit", text, 1, true)
  end)

  it("a chaos fault of shard 2 stops it alone: shard 1 merges on, shard 2 back from the set at epoch 2", function()
    local path, text = with_syncers(sharded_recipe(3000), '{ { at = "1s", syncer = "down", down = "1s", shard = 2 } }',
      "chaos.lua")
    local out = S.dir .. "/run"
    local log, code = H.sh(string.format("%s run %s --out %s --quiet", exe, path, out))
    assert.are.equal(0, code, log)
    local ev = H.events(out .. "/metrics.jsonl")
    local faults = {}
    for _, e in ipairs(H.of_kind(ev, "fault", "syncer")) do faults[#faults + 1] = e end
    assert.are.equal(2, #faults)
    assert.is_true(faults[1].begin and faults[1].shard == 2)
    assert.is_true(faults[2].begin == false and faults[2].shard == 2 and faults[2].epoch == 2)
    local by = { 0, 0 }
    for _, e in ipairs(H.of_kind(ev, "merge")) do
      if e.wall_s > faults[1].wall_s and e.wall_s < faults[2].wall_s then by[e.shard] = by[e.shard] + 1 end
    end
    assert.is_true(by[1] > 0, "shard 1 merged while shard 2 was down")
    assert.are.equal(0, by[2])
    local s = H.summary_of(ev)
    assert.are.same({ 1, 2 }, s.epochs)
    assert.are.equal(1, s.syncer_restarts)
    -- a shard past islands.syncers is refused
    local bad = S.write("bad.lua", (text:gsub("shard = 2", "shard = 3")))
    local t3, c3 = H.sh(string.format("%s run %s --out %s/bad --quiet", exe, bad, S.dir))
    assert.are.equal(2, c3, t3)
    assert.matches("chaos[1].shard = 3: expected a shard in [1, 2] (islands.syncers = 2)", t3, 1, true)
  end)

  it("sim models the shards: a fault of shard 2 stops its fragments' merges alone, no learner waits", function()
    local path = with_syncers(sharded_recipe(60), '{ { at = "20.5s", syncer = "down", down = "20s", shard = 2 } }',
      "simchaos.lua")
    local out = S.dir .. "/sim"
    local log, code = H.sh(string.format("%s sim %s --out %s --quiet", exe, path, out))
    assert.are.equal(0, code, log)
    local ev = H.events(out .. "/metrics.jsonl")
    local faults = H.of_kind(ev, "fault", "syncer")
    assert.are.equal(2, #faults)
    assert.is_true(faults[1].begin and faults[1].shard == 2 and faults[2].begin == false and faults[2].shard == 2)
    local r = dofile(path)
    local model = require("diloco.island").build_model(r.model, r.seed)
    local owner = diloco.Plan(diloco.Params(model:parameters()), { fragments = 4 }):deal(2)
    local by, after = { 0, 0 }, 0
    for _, e in ipairs(H.of_kind(ev, "merge")) do
      assert.are.equal(owner[e.fragment], e.shard, "fragment " .. e.fragment .. " merged by its owner")
      if e.virtual_s > 20.5 and e.virtual_s < 40.5 then by[e.shard] = by[e.shard] + 1 end
      if e.virtual_s > 40.5 and e.shard == 2 then after = after + 1 end
    end
    assert.is_true(by[1] > 0, "shard 1 merged while shard 2 was down")
    assert.are.equal(0, by[2])
    assert.is_true(after > 0, "shard 2 merged again after its restart")
    local s = H.summary_of(ev)
    assert.are.equal(2, s.syncers)
    for m = 1, 3 do assert.are.equal(60, s.per_learner[m].steps, "learner " .. m .. " never waited") end
    assert.is_true(s.goodput > 0 and s.goodput < 1)
  end)

  it("killed with SIGKILL resumes every shard from one checkpoint set", function()
    local path = with_syncers(sharded_recipe(3000))
    local out = S.dir .. "/run"
    local pid = assert(diloco.proc.spawn { exe, "run", path, "--out", out, "--quiet",
      stdout = S.dir .. "/run1.log", stderr = S.dir .. "/run1.log" })
    H.await_or_kill(pid, 120, "3 checkpoint sets", function()
      return #diloco.rundir.checkpoints(out .. "/syncer") >= 3
    end)
    diloco.proc.signal(pid, "KILL")
    diloco.proc.wait(pid, true)
    -- its learners follow it (they save and leave): their directories free again
    for m = 1, 3 do
      local lockfile = string.format("%s/learner-%d/.lock", out, m)
      H.await_or_kill(pid, 60, "learner " .. m .. "'s directory free", function()
        local lock = diloco.lock_dir(lockfile, "shards_spec")
        if lock then lock:close() end
        return lock ~= nil
      end)
    end
    local list = diloco.rundir.checkpoints(out .. "/syncer")
    local newest = list[#list]
    local merges_at = tonumber(diloco.safetensors_meta(newest.path)["diloco.merges"])
    local text, code = H.sh(string.format("%s run %s --out %s --quiet --resume latest", exe, path, out))
    assert.are.equal(0, code, text)
    local ev = H.events(out .. "/metrics.jsonl")
    local resumed = H.of_kind(ev, "resume")
    assert.are.equal(1, #resumed)
    assert.are.equal(newest.path, resumed[1].from)
    assert.are.equal(merges_at, resumed[1].merges)
    local s = H.summary_of(ev)
    assert.are.same({ 2, 2 }, s.epochs) -- (every shard the next epoch)
    assert.is_true(s.merges > merges_at)
  end)
end)
