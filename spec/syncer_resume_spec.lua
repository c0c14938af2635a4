-- A syncer resumed with `diloco-lua syncer --resume` (issue 35): which checkpoint it
-- continues from, what it says of the merges lost, and the learners it moves back.  The
-- on-disk state a kill leaves is built by hand where its timing matters (no sleeps, no
-- kill timed against a write); the rest are real processes on a tiny GPT.
local H = require "spec.helpers"
local events, of_kind, summary_of = H.events, H.of_kind, H.summary_of
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end

local function recipe(S, name, o)
  return H.tiny_recipe(S, name, { steps = o.steps, chaos = o.chaos, runtime = { join_timeout = o.join_timeout or "2s",
    syncer_every = o.syncer_every or 5 } })
end

-- The lines of a file, and the file rewritten with lines 1..n of them.
local function truncate_lines(path, n)
  local lines = H.read_lines(path)
  local f = assert(io.open(path, "w"))
  for i = 1, n do f:write(lines[i], "\n") end
  f:close()
end

-- Asserts that every counter of the summary of the run whose metrics are `ev` (its
-- learners' in dir/learner-N, when `supervised`) equals a count of the events it counts
-- (issue 35, item 7: the summary said rejects 7 with 54 reject events, syncer_restarts 0
-- after 7 restarts by hand, faults 0 with fault events).
local function counters_match_events(ev, dir, supervised)
  local s = summary_of(ev)
  -- a fault counts once, at its begin: not its end (begin = false), nor a recovery
  local function counts(e) return e.begin ~= false and e.kind ~= "joined" and e.kind ~= "recovered" end
  local n = { reject = 0, fault = 0, merge = 0, resume = 0, syncer_back = 0, lost = 0, crash = {} }
  for _, e in ipairs(ev) do
    if e.event == "reject" then n.reject = n.reject + 1 end
    if e.event == "merge" then n.merge = n.merge + 1 end
    if e.event == "resume" then
      n.resume = n.resume + 1
      n.lost = n.lost + e.merges_lost
    end
    if e.event == "fault" then
      if counts(e) then n.fault = n.fault + 1 end
      if e.kind == "syncer" and e.begin == false then n.syncer_back = n.syncer_back + 1 end
      if e.kind == "syncer" and e.begin == true then n.lost = n.lost + e.merges_lost end
      if e.kind == "crash" then n.crash[e.learner] = (n.crash[e.learner] or 0) + 1 end
    end
  end
  assert.are.equal(n.reject, s.rejects, "rejects: the reject events")
  assert.are.equal(n.fault, s.faults, "faults: the fault events that begin one")
  assert.are.equal(n.resume + n.syncer_back, s.syncer_restarts, "syncer_restarts: resumes and chaos syncer restarts")
  assert.are.equal(1 + s.syncer_restarts, s.epoch, "one epoch per syncer start")
  assert.are.equal(n.lost, s.merges_lost, "merges_lost: as each restart said")
  assert.are.equal(n.merge, s.merges + s.merges_lost, "merges: the merge events but those lost")
  if supervised then
    local restarts = 0
    for m = 1, s.learners do
      local joins = #of_kind(events(string.format("%s/learner-%d/metrics.jsonl", dir, m)), "join")
      assert.are.equal(joins, s.per_learner[m].processes, "learner " .. m .. "'s processes: its join events")
      restarts = restarts + joins - 1
      assert.are.equal(n.crash[m] or 0, s.per_learner[m].crashes, "learner " .. m .. "'s crashes: its crash faults")
    end
    assert.are.equal(restarts, s.restarts, "restarts: the learners' joins after their first")
  end
  return s, n
end

describe("diloco-lua syncer --resume", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  -- Seen (issue 35, item 6): a syncer killed after its checkpoint's rename and before the
  -- model's left checkpoint-N beside a model.safetensors of the checkpoint before; --resume
  -- deleted the complete checkpoint-N and resumed from the one before, saying nothing.
  it("keeps a complete checkpoint newer than model.safetensors and resumes from it", function()
    local path = recipe(S, "cut", { syncer_every = 5 })
    local out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local dir = S.dir .. "/run/syncer"
    local list = diloco.rundir.checkpoints(dir)
    assert.is_true(#list >= 2, "checkpoints in " .. dir .. ": " .. #list .. ", expected at least 2")
    local newest, before = list[#list], list[#list - 1]
    -- the instant between the two renames of the save of `newest`: its checkpoint whole
    -- and in place, model.safetensors still the one of `before`, the metrics ending at its
    -- last merge (its checkpoint event comes after both renames)
    local t, meta = assert(diloco.load_safetensors(dir .. "/model.safetensors"))
    meta["diloco.step"], meta.format = tostring(before.step), nil
    local pairs_list = {}
    for name, tensor in pairs(t) do pairs_list[#pairs_list + 1] = { name, tensor } end
    assert(diloco.save_safetensors(dir .. "/model.safetensors", pairs_list, meta))
    local mpath = S.dir .. "/run/metrics.jsonl"
    local lines, merges, cut_at = H.read_lines(mpath), 0, nil
    for i, l in ipairs(lines) do
      if l:find('^{"event":"merge"') then
        merges = merges + 1
        if merges == newest.step then cut_at = i end
      end
    end
    assert.is_number(cut_at, "the merge " .. newest.step .. " in " .. mpath)
    truncate_lines(mpath, cut_at)

    out, code = H.sh(string.format("%s syncer %s --listen 127.0.0.1:0 --out %s/run --resume --quiet", exe, path,
      S.dir))
    assert.are.equal(0, code, out)
    -- the complete checkpoint is kept and is what the syncer continued from
    assert.is_not_nil(diloco.file_id(newest.path), newest.path .. " was deleted")
    local resumes = of_kind(events(mpath), "resume")
    assert.are.equal(1, #resumes)
    assert.are.equal(newest.path, resumes[1].from)
    assert.are.equal(newest.step, resumes[1].merges)
    assert.are.equal(0, resumes[1].merges_lost)
    -- model.safetensors is again of the newest checkpoint's step
    local mmeta = assert(diloco.safetensors_meta(dir .. "/model.safetensors"))
    assert.are.equal(tostring(newest.step), mmeta["diloco.step"])
    -- with the one model metadata: the effective recipe (it was written before the recipe
    -- was read, without it) and the model section
    assert.are.same(diloco.json_decode(H.read_lines(S.dir .. "/run/recipe.json")[1] and
      table.concat(H.read_lines(S.dir .. "/run/recipe.json"), "\n")), diloco.json_decode(mmeta["diloco.recipe_json"]))
    assert.is_string(mmeta["diloco.model"])
    -- said on stderr under --quiet: which checkpoint, how many merges lost
    assert.matches("resumed from " .. newest.path .. " (" .. newest.step .. " merges): no merges lost", out, 1, true)
  end)

  -- Issue 35, item 8: a syncer resumed from a checkpoint older than its last merges numbers
  -- the fragments' versions from the checkpoint's again, so the learners, which reported
  -- later ones, are resynced to lower versions: each such resync is a `resync` event.
  it("makes each resync of a learner to a lower version than it reported a resync event", function()
    -- (the learners would train for minutes: they are stopped once they merged again)
    local path = recipe(S, "back", { syncer_every = 100000, steps = 1000000, join_timeout = "60s" })
    local secret = S.write("secret", "s3cret\n")
    local addr, out_dir = S.dir .. "/address", S.dir .. "/run"
    local pids = {}
    local function syncer(listen, extra)
      local argv = { exe, "syncer", path, "--listen", listen, "--address-file", addr, "--secret-file", secret,
        "--out", out_dir, "--quiet", stdout = S.dir .. "/syncer.log", stderr = S.dir .. "/syncer.log" }
      for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
      local pid = assert(diloco.proc.spawn(argv))
      pids[#pids + 1] = pid
      return pid
    end
    local ok, err = pcall(function()
      local a = syncer("127.0.0.1:0")
      H.await_or_kill(a, 30, "address file", function() return #H.read_lines(addr) > 0 end)
      local learners = {}
      for id = 1, 2 do
        learners[id] = assert(diloco.proc.spawn { exe, "learner", path, "--connect", "@" .. addr, "--id", tostring(id),
          "--secret-file", secret, "--out", S.dir .. "/l" .. id, "--overwrite", "--quiet",
          stdout = S.dir .. "/l" .. id .. ".log", stderr = S.dir .. "/l" .. id .. ".log", env = { OMP_NUM_THREADS = "1" } })
        pids[#pids + 1] = learners[id]
      end
      -- both learners contributed from later versions than the start's checkpoint holds (the
      -- first to join the resumed syncer is then sent version 0 of a fragment it reported
      -- later than: a resync event at least)
      H.await_or_kill(a, 60, "12 merges, each learner's from a version >= 1", function()
        local from, n = {}, 0
        for _, l in ipairs(H.read_lines(out_dir .. "/metrics.jsonl")) do
          local e = l:find('^{"event":"merge"') and diloco.json_decode(l)
          if type(e) == "table" then
            n = n + 1
            for _, ct in ipairs(e.contributors) do from[ct.learner] = from[ct.learner] or ct.base_version >= 1 end
          end
        end
        return n >= 12 and from[1] and from[2]
      end)
      local port = H.read_lines(addr)[1]:match(":(%d+)$") -- where the learners reconnect
      diloco.proc.signal(a, "KILL")
      diloco.proc.wait(a, true)
      local c = syncer("127.0.0.1:" .. port, { "--resume" })
      -- until both learners' contributions were merged by the resumed syncer: both joined it
      H.await_or_kill(c, 60, "merges of both learners after the resume", function()
        local after, from = false, {}
        for _, l in ipairs(H.read_lines(out_dir .. "/metrics.jsonl")) do
          if l:find('^{"event":"resume"') then after = true end
          if after and l:find('^{"event":"merge"') then
            local e = diloco.json_decode(l)
            for _, ct in ipairs(type(e) == "table" and e.contributors or {}) do from[ct.learner] = true end
          end
        end
        return from[1] and from[2]
      end)
      for id = 1, 2 do
        diloco.proc.signal(learners[id], "TERM")
        local st = diloco.proc.wait(learners[id], true)
        assert.is_true(st.exited == 0 or st.exited == 143, "learner " .. id .. " stopped by TERM: "
          .. tostring(st.exited) .. ": " .. table.concat(H.read_lines(S.dir .. "/l" .. id .. ".log"), "\n"))
      end
      local st = diloco.proc.wait(c, true)
      assert.are.equal(0, st.exited, table.concat(H.read_lines(S.dir .. "/syncer.log"), "\n"))
      pids = {}
    end)
    for _, pid in ipairs(pids) do
      pcall(diloco.proc.signal, pid, "KILL")
      pcall(diloco.proc.wait, pid, true)
    end
    assert(ok, err)
    local log = table.concat(H.read_lines(S.dir .. "/syncer.log"), "\n")
    local ev = events(out_dir .. "/metrics.jsonl")
    local resume = of_kind(ev, "resume")[1]
    assert.are.equal(0, resume.merges, "resumed from the start's checkpoint")
    assert.is_true(resume.merges_lost >= 12, "merges lost: " .. tostring(resume.merges_lost))
    -- losing work is never silent: said on stderr under --quiet
    assert.matches(string.format("resumed from %s (0 merges): %d merges made after it lost", resume.from,
      resume.merges_lost), log, 1, true)
    -- what each learner reported (the base versions of its merged contributions) before the
    -- resume, per fragment
    local reported, before = {}, true
    for _, e in ipairs(ev) do
      if e.event == "resume" then before = false end
      if before and e.event == "merge" then
        for _, c in ipairs(e.contributors) do
          local r = reported[c.learner] or {}
          reported[c.learner] = r
          r[e.fragment] = math.max(r[e.fragment] or -1, c.base_version)
        end
      end
    end
    local resyncs = of_kind(ev, "resync")
    assert.is_true(#resyncs > 0, "no resync event after a resume that lost " .. resume.merges_lost .. " merges")
    -- each to the version the resumed syncer held when the learner joined it: the start's
    -- checkpoint's 0, then one more at each of its merges before that
    local version, to = { 0, 0 }, {}
    for _, e in ipairs(ev) do
      if e.event == "resume" then version = { 0, 0 } end
      if e.event == "merge" then version[e.fragment] = e.version end
      if e.event == "resync" then to[e] = version[e.fragment] end
    end
    local seen = {}
    for _, r in ipairs(resyncs) do
      assert.are.equal(resume.epoch, r.epoch)
      assert.are.equal(to[r], r.to_version, diloco.json_encode(r))
      assert.is_true(r.from_version > r.to_version, diloco.json_encode(r))
      assert.are.equal(reported[r.learner][r.fragment], r.from_version, diloco.json_encode(r))
      local key = r.learner .. "/" .. r.fragment
      assert.is_nil(seen[key], "one resync event per learner and fragment: " .. key)
      seen[key] = true
    end
    -- a syncer started again by hand with --resume is a restart; its summary counts the
    -- whole run's events, the dead syncer's too
    local sm = counters_match_events(ev, out_dir, false)
    assert.are.equal(1, sm.syncer_restarts)
  end)
end)

describe("the summary of a run with faults", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("counts the restart of a syncer still down when the run ends", function()
    -- (the run's end brings it back to save the model: that restart was neither counted nor
    -- on the tape, so the summary's epoch 2 disagreed with syncer_restarts 0)
    local path = recipe(S, "downend", { steps = 10000000, join_timeout = "30s", chaos = [[{
    { at = "0.5s", syncer = "down", down = "600s" } }]] })
    local log = S.dir .. "/run.log"
    local pid = assert(diloco.proc.spawn { exe, "run", path, "--out", S.dir .. "/run", "--quiet", stdout = log,
      stderr = log, parent_death = "KILL" })
    H.await_or_kill(pid, 120, "the syncer fault", function()
      for _, e in ipairs(events(S.dir .. "/run/metrics.jsonl") or {}) do
        if e.event == "fault" and e.kind == "syncer" and e.begin then return true end
      end
    end)
    diloco.proc.signal(pid, "TERM")
    local code = H.wait_all({ pid }, 120)[1]
    assert.are.same({ exited = 128 + 15 }, code, table.concat(H.read_lines(log), "\n"))
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local s = counters_match_events(ev, S.dir .. "/run", true)
    assert.are.equal(1, s.syncer_restarts)
    assert.are.equal(2, s.epoch)
  end)

  it("counts exactly the events it counts", function()
    -- a learner killed (restarted after 0.5 s), a syncer fault (its learners' next
    -- messages are rejected: another epoch), a pause
    local path = recipe(S, "faults", { syncer_every = 20, steps = 6000, join_timeout = "30s", chaos = [[{
    { at = "1s", kill = 2, down = "0.5s" },
    { at = "2s", syncer = "down", down = "0.3s" },
    { at = "2.5s", pause = 1, down = "0.3s" } }]] })
    local out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local s, n = counters_match_events(ev, S.dir .. "/run", true)
    -- the faults took place: otherwise the counts above prove little
    assert.are.equal(1, s.syncer_restarts, out)
    assert.is_true(s.restarts >= 1, "restarts " .. tostring(s.restarts))
    assert.is_true(n.fault >= 3, "fault events that count: " .. n.fault)
    assert.is_true(n.reject >= 1, "reject events: " .. n.reject .. " (a syncer fault fences its learners' next messages)")
  end)
end)
