-- Standbys (docs/shards.md, "Standbys"): `diloco-lua syncer RECIPE --shard 1/2 --standby-of
-- @ADDR` holds shard 1's state from a replica of each of its primary's merges, which reach
-- no learner before the standby acknowledged them.  Its primary killed with SIGKILL in the
-- middle of a run, the standby takes over after its lease, the learners (given both
-- addresses, `--connect @A|@A2,@B`) reconnect to it, and the run completes: the standby's
-- merge tape holds every version of shard 1's fragments once, none missing, the primary's
-- among them.  The learners run until the standby has merged from each of them, then are
-- stopped (SIGTERM), so the test does not depend on the build's speed.  Every test kills
-- only the pids it started.
local H = require "spec.helpers"
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end

local function recipe(S, steps)
  return H.tiny_recipe(S, "standby", { count = 3, steps = steps,
    sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
    runtime = { timeout = "3s", join_timeout = "60s" } })
end

local function spawn(S, name, args)
  local log = S.dir .. "/" .. name .. ".log"
  args.stdout, args.stderr, args.parent_death = log, log, "KILL"
  args.env = { OMP_NUM_THREADS = "1" }
  return assert(diloco.proc.spawn(args))
end

-- Shard i of 2 (extra: more arguments, before the recipe's options).
local function shard(S, path, i, extra)
  local args = { exe, "syncer", path, "--shard", i .. "/2", "--listen", "127.0.0.1:0", "--secret-file",
    S.dir .. "/secret", "--out", S.dir .. "/run", "--quiet" }
  for _, a in ipairs(extra) do args[#args + 1] = a end
  return spawn(S, extra.name, args)
end

local function learner(S, path, m, connect)
  return spawn(S, "l" .. m, { exe, "learner", path, "--connect", connect, "--id", tostring(m), "--secret-file",
    S.dir .. "/secret", "--out", S.dir .. "/run/l" .. m, "--overwrite", "--quiet" })
end

local function log(S, name) return table.concat(H.read_lines(S.dir .. "/" .. name .. ".log"), "\n") end

-- The merges of a metrics file: list of {fragment, version, replica, contributors}.
local function merges(path)
  local out = {}
  for _, e in ipairs(H.events(path)) do
    if e.event == "merge" then out[#out + 1] = e end
  end
  return out
end

describe("a shard with a standby", function()
  it("loses no merge when its primary is killed with SIGKILL: the standby takes over, the run completes", function()
    local S = H.scratch()
    local path = recipe(S, 10000000)
    S.write("secret", "st4ndby\n")
    local a1, a1s, a2 = S.dir .. "/addr1", S.dir .. "/addr1s", S.dir .. "/addr2"
    local p1 = shard(S, path, 1, { "--address-file", a1, name = "primary1" })
    local p2 = shard(S, path, 2, { "--address-file", a2, name = "shard2" })
    local sb = shard(S, path, 1, { "--address-file", a1s, "--standby-of", "@" .. a1, "--lease", "1", name = "standby1" })
    local connect = string.format("@%s|@%s,@%s", a1, a1s, a2)
    local ls = {}
    for m = 1, 3 do ls[m] = learner(S, path, m, connect) end
    local mp = S.dir .. "/run/shard-1/metrics.jsonl"
    local ms = S.dir .. "/run/shard-1-standby/metrics.jsonl"
    -- the standby attached, and the primary merged with it
    H.await_or_kill(p1, 60, "merges at shard 1 with its standby attached", function()
      local ev = H.events(mp)
      local attached = false
      for _, e in ipairs(ev) do
        if e.event == "fault" and e.kind == "standby" and (e.text or ""):find("attached", 1, true) then attached = true end
      end
      return attached and #merges(mp) >= 8
    end)
    diloco.proc.signal(p1, "KILL")
    diloco.proc.wait(p1, true)
    -- every learner merged at the standby after its takeover; then the learners stop
    H.await_or_kill(sb, 180, "merges of every learner at the standby after its takeover", function()
      local by = {}
      for _, e in ipairs(merges(ms)) do
        if not e.replica then
          for _, c in ipairs(e.contributors) do by[c.learner] = true end
        end
      end
      return by[1] and by[2] and by[3]
    end)
    for m = 1, 3 do diloco.proc.signal(ls[m], "TERM") end
    local codes = H.wait_all({ sb, p2, ls[1], ls[2], ls[3] }, 180)
    for i, c in ipairs(codes) do
      local name = ({ "standby1", "shard2", "l1", "l2", "l3" })[i]
      assert.are.same(i <= 2 and { exited = 0 } or { exited = 128 + 15 }, c, name .. ":\n" .. log(S, name))
    end
    -- the standby's tape: every version of each of shard 1's fragments once, in order,
    -- from 1; the primary's merges among them (the same contributors), and its own after
    local tape = merges(ms)
    local next_v, replicas, own, by = {}, 0, 0, {}
    for _, e in ipairs(tape) do
      local want = (next_v[e.fragment] or 0) + 1
      assert.are.equal(want, e.version, string.format("fragment %d: version %d after %d", e.fragment, e.version,
        want - 1))
      next_v[e.fragment] = e.version
      if e.replica then replicas = replicas + 1 else
        own = own + 1
        for _, c in ipairs(e.contributors) do by[c.learner] = true end
      end
    end
    assert.is_true(replicas >= 8, "replicated merges: " .. replicas)
    assert.is_true(own > 0, "merges after the takeover: " .. own)
    for m = 1, 3 do assert.is_true(by[m], "learner " .. m .. " merged at the standby after the takeover") end
    local at = {}
    for _, e in ipairs(tape) do at[e.fragment .. ":" .. e.version] = e end
    for _, e in ipairs(merges(mp)) do -- no completed merge lost: the primary's are the standby's
      local s = at[e.fragment .. ":" .. e.version]
      assert.is_not_nil(s, string.format("the primary's merge of fragment %d v%d is on the standby's tape",
        e.fragment, e.version))
      assert.are.equal(#e.contributors, #s.contributors)
      for i, c in ipairs(e.contributors) do assert.are.equal(c.learner, s.contributors[i].learner) end
    end
    -- no learner waited for the syncer (decoupled never blocks), through the takeover too
    for m = 1, 3 do
      local ls_sum = H.summary_of(H.events(S.dir .. "/run/l" .. m .. "/metrics.jsonl"))
      assert.are.equal(0, ls_sum.wait_s, "learner " .. m .. " waited")
    end
    -- it took over with a later epoch, and as shard 1 assembled the run's model
    local sum = H.summary_of(H.events(ms))
    assert.is_number(sum.took_over_s)
    assert.is_true(sum.epoch >= 2)
    assert.are.equal(S.dir .. "/run/model.safetensors", sum.assembled)
    assert.is_true(sum.final_eval_loss < 5, "the assembled model learned: " .. tostring(sum.final_eval_loss)) -- (ln 256 = 5.5)
    S.cleanup()
  end)
  it("refuses bad standby options, named", function()
    local S = H.scratch()
    local path = recipe(S, 200)
    for _, case in ipairs {
      { { "--lease", "1" }, "--lease: only a standby (--standby-of) has a lease" },
      { { "--standby-of", "127.0.0.1:1", "--set", "sync.preset=dp", "--set", "sync.fragments=1" },
        "--standby-of: data parallel has no standby" },
      { { "--standby-of", "nonsense" }, 'address "nonsense": expected HOST:PORT' },
      { { "--standby-of", "127.0.0.1:1", "--lease", "0" }, "--lease" },
    } do
      local out, status = H.sh(table.concat({ exe, "syncer", path, "--out", S.dir .. "/bad", "--quiet",
        table.unpack(case[1]) }, " ") .. " 2>&1")
      assert.are.equal(2, status, out)
      assert.matches(case[2], out, 1, true)
    end
    S.cleanup()
  end)
end)

describe("standbys under run (islands.standbys)", function()
  it("take over a killed primary, are replaced when lost, and a shard that lost both is restored", function()
    local S = H.scratch()
    local path = H.tiny_recipe(S, "sbrun", { count = 3, steps = 10000000, islands = { syncers = 2, standbys = true },
      sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
      runtime = { timeout = "2s", join_timeout = "60s", syncer_every = 4 },
      chaos = '{ { at = "1s", syncer = "down", down = "1s", shard = 1 }, '
        .. '{ at = "1s", syncer = "down", down = "0.5s", shard = 2, role = "standby" }, '
        .. '{ at = "4s", syncer = "down", down = "1s", shard = 2, role = "both" } }' })
    local out = S.dir .. "/run"
    local pid = spawn(S, "run", { exe, "run", path, "--out", out, "--quiet" })
    local mp = out .. "/metrics.jsonl"
    local function faults(ev, role, shard)
      local t = {}
      for _, e in ipairs(ev) do
        if e.event == "fault" and e.kind == "syncer" and e.role == role and e.shard == shard then t[#t + 1] = e end
      end
      return t
    end
    -- every fault over, and each shard merging again after the last one
    H.await_or_kill(pid, 180, "merges of both shards after the faults", function()
      local ev = H.events(mp)
      local both = faults(ev, "both", 2)
      if #both < 2 or #faults(ev, "primary", 1) < 2 or #faults(ev, "standby", 2) < 2 then return false end
      local after = { 0, 0 }
      for _, e in ipairs(ev) do
        if e.event == "merge" and e.wall_s > both[2].wall_s then after[e.shard] = after[e.shard] + 1 end
      end
      return after[1] >= 8 and after[2] >= 8
    end)
    diloco.proc.signal(pid, "TERM")
    local code = H.wait_all({ pid }, 120)[1]
    assert.are.same({ exited = 128 + 15 }, code, log(S, "run"))
    local ev = H.events(mp)
    -- shard 1's standby took over (epoch 2); no merge of shard 1 lost or repeated
    local took = H.takeovers(ev)
    assert.are.equal(1, #took)
    assert.are.same({ 1, 2 }, { took[1].shard, took[1].epoch })
    local both = faults(ev, "both", 2)
    assert.is_number(both[2].merges_lost)
    local next_v, owner = {}, {}
    for _, e in ipairs(ev) do
      if e.event == "merge" then
        owner[e.fragment] = e.shard
        local want = (next_v[e.fragment] or 0) + 1
        if e.shard == 2 and e.wall_s > both[2].wall_s and (next_v[e.fragment] or 0) >= e.version then
          want = e.version -- (shard 2 restored from its checkpoint: its versions go on from there)
        end
        assert.are.equal(want, e.version, string.format("fragment %d (shard %d): version %d after %d", e.fragment,
          e.shard, e.version, next_v[e.fragment] or 0))
        next_v[e.fragment] = e.version
      end
    end
    assert.is_true(owner[1] ~= nil and owner[2] ~= nil and owner[3] ~= nil and owner[4] ~= nil)
    local sum = H.summary_of(ev)
    assert.are.equal(1, sum.takeovers)
    assert.is_true(sum.epochs[1] == 2 and sum.epochs[2] >= 2)
    -- every learner reached shard 1 again at the standby that took over (after the kill: the
    -- takeover's record is written when the run's host polls it, which may be later)
    local killed = faults(ev, "primary", 1)[1]
    for m = 1, 3 do
      local back = false
      for _, e in ipairs(H.events(out .. "/learner-" .. m .. "/metrics.jsonl")) do
        if e.event == "connected" and (e.text or ""):find("shard 1 of 2", 1, true) and e.time > killed.time then
          back = true
        end
      end
      assert.is_true(back, "learner " .. m .. " reconnected to shard 1 after the takeover")
    end
    S.cleanup()
  end)
  it("in sim too, and a fault of a standby without standbys is refused, named", function()
    local S = H.scratch()
    local o = { count = 3, steps = 60, sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
      chaos = '{ { at = "20.5s", syncer = "down", down = "20s", shard = 1 } }' }
    local text = table.concat(H.read_lines(H.tiny_recipe(S, "sbsim", o)), "\n") -- (no standbys: the bad forms below)
    o.islands = { syncers = 2, standbys = true }
    local path = H.tiny_recipe(S, "sbsim2", o)
    local out, code = H.sh(string.format("%s sim %s --out %s/sim --quiet 2>&1", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local ev = H.events(S.dir .. "/sim/metrics.jsonl")
    assert.are.equal(1, H.summary_of(ev).takeovers)
    local during = 0 -- the standby serves after its lease (islands.timeout: 10 steps of 1 s here)
    for _, e in ipairs(ev) do
      if e.event == "merge" and e.shard == 1 and e.virtual_s > 31 and e.virtual_s < 40.5 then during = during + 1 end
    end
    assert.is_true(during > 0, "shard 1 merged at its standby before the fault ended")
    H.sim_refuses(exe, S, "bad", (text:gsub('shard = 1 }', 'shard = 1, role = "standby" }')),
      { 'chaos[1].role = "standby": the syncer has no standby (expected islands.standbys = true)' })
    -- a role that is none of the three, and standbys that are not a boolean, named
    H.sim_refuses(exe, S, "bad2", (text:gsub('shard = 1 }', 'shard = 1, role = "backup" }')),
      { 'chaos[1].role = "backup": expected "primary"' })
    H.sim_refuses(exe, S, "bad3", (text:gsub("islands = { count = 3 }", 'islands = { count = 3, standbys = "yes" }')),
      { "islands.standbys" })
    S.cleanup()
  end)
end)
