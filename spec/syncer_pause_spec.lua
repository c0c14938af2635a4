-- Pauses of the syncer (docs/chaos.md: `{ syncer = "pause", down = ..., shard = ..., role
-- = ... }`, kind pause naming no learner): the syncer, or one shard of it, stopped where it is
-- as SIGSTOP stops a process.  In `sim` a paused shard reads nothing and loses nothing: what
-- reached it is merged when it goes on.  Under `run` a primary paused for longer than the
-- transport's timeout and the lease is taken over by its standby, and the stopped one is
-- replaced by a new standby when the pause ends; a short pause takes nothing over.  The run
-- test kills only the pid it started.
local H = require "spec.helpers"
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end

local function log(path) return table.concat(H.read_lines(path), "\n") end

describe("a pause of the syncer", function()
  it("in sim: the paused shard merges nothing, loses nothing, and merges what waited when it goes on", function()
    local S = H.scratch()
    local path = H.tiny_recipe(S, "psim", { count = 3, steps = 60, islands = { syncers = 2 },
      sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
      chaos = '{ { at = "20.5s", syncer = "pause", down = "8s", shard = 1 } }' })
    local text = table.concat(H.read_lines(path), "\n")
    local out, code = H.sh(string.format("%s sim %s --out %s/sim --quiet 2>&1", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local ev = H.events(S.dir .. "/sim/metrics.jsonl")
    local during, after, by, other = 0, 0, {}, 0
    local begin, ends
    for _, e in ipairs(ev) do
      if e.event == "fault" and e.kind == "pause" then
        assert.is_nil(e.learner)
        assert.are.equal(1, e.shard)
        if e.begin then begin = e else ends = e end
      elseif e.event == "merge" and e.shard == 1 then
        if e.virtual_s > 20.5 and e.virtual_s < 28.5 then during = during + 1 end
        if e.virtual_s == 28.5 then
          after = after + 1
          for _, c in ipairs(e.contributors) do by[c.learner] = true end
        end
      elseif e.event == "merge" and e.virtual_s > 20.5 and e.virtual_s < 28.5 then
        other = other + 1
      end
    end
    assert.is_not_nil(begin, "the pause's begin on the tape")
    assert.is_not_nil(ends, "the pause's end on the tape")
    assert.are.equal(0, during, "shard 1 merged while paused")
    assert.is_true(other > 0, "shard 2 merged on")
    assert.is_true(after > 0 and by[1] and by[2] and by[3], "what reached shard 1 merged when it went on")
    local sum = H.summary_of(ev)
    assert.are.equal(0, sum.dropped, "messages lost")
    -- bad forms, named
    H.sim_refuses(exe, S, "bad", (text:gsub('syncer = "pause"', 'syncer = "stop"')),
      { 'chaos[1].syncer = "stop": expected "down"', 'or "pause"' })
    H.sim_refuses(exe, S, "bad2", (text:gsub("shard = 1 }", 'shard = 1, role = "standby" }')),
      { 'chaos[1].role = "standby": the syncer has no standby' })
    S.cleanup()
  end)

  it("under run: a primary paused past its lease is taken over and replaced; a short pause takes nothing over",
    function()
    local S = H.scratch()
    local path = H.tiny_recipe(S, "prun", { count = 3, steps = 10000000, islands = { syncers = 2, standbys = true },
      sync = { preset = "decoupled", H = 8, fragments = 4, tau = 1 },
      runtime = { timeout = "2s", join_timeout = "60s" },
      chaos = '{ { at = "1s", syncer = "pause", down = "8s", shard = 1 }, '
        .. '{ at = "1s", syncer = "pause", down = "0.5s", shard = 2 } }' })
    local out = S.dir .. "/run"
    local logf = S.dir .. "/run.log"
    local pid = assert(diloco.proc.spawn { exe, "run", path, "--out", out, "--quiet", stdout = logf, stderr = logf,
      parent_death = "KILL", env = { OMP_NUM_THREADS = "1" } })
    local mp = out .. "/metrics.jsonl"
    local function pause_end(ev, shard)
      for _, e in ipairs(ev) do
        if e.event == "fault" and e.kind == "pause" and e.begin == false and e.shard == shard then return e end
      end
    end
    -- both pauses over, a new standby of shard 1 attached, and both shards merging after
    H.await_or_kill(pid, 180, "merges of both shards after the pauses", function()
      local ev = H.events(mp)
      local e1, e2 = pause_end(ev, 1), pause_end(ev, 2)
      if not e1 or not e2 then return false end
      local after, attached = { 0, 0 }, false
      for _, e in ipairs(ev) do
        if e.event == "merge" and e.wall_s > e1.wall_s then after[e.shard] = after[e.shard] + 1 end
        if e.event == "fault" and e.kind == "standby" and e.shard == 1 and e.wall_s > e1.wall_s
          and (e.text or ""):find("attached", 1, true) then attached = true end
      end
      return attached and after[1] >= 8 and after[2] >= 8
    end)
    diloco.proc.signal(pid, "TERM")
    local code = H.wait_all({ pid }, 120)[1]
    assert.are.same({ exited = 128 + 15 }, code, log(logf))
    local ev = H.events(mp)
    -- shard 1 taken over (epoch 2), shard 2 not; every version of each fragment once, in order
    local took = H.takeovers(ev)
    assert.are.equal(1, #took)
    assert.are.same({ 1, 2 }, { took[1].shard, took[1].epoch })
    assert.is_true(pause_end(ev, 1).taken_over)
    assert.is_nil(pause_end(ev, 2).taken_over)
    local next_v = {}
    for _, e in ipairs(ev) do
      if e.event == "merge" then
        local want = (next_v[e.fragment] or 0) + 1
        assert.are.equal(want, e.version, string.format("fragment %d (shard %d): version %d after %d", e.fragment,
          e.shard, e.version, want - 1))
        next_v[e.fragment] = e.version
      end
    end
    local sum = H.summary_of(ev)
    assert.are.equal(1, sum.takeovers)
    assert.is_true(sum.epochs[1] == 2 and sum.epochs[2] == 1, "epochs " .. diloco.json_encode(sum.epochs))
    S.cleanup()
  end)
end)
