-- `diloco-lua sim --replay OUT`: a finished real run (learner processes over loopback)
-- re-executed from its merge tape (lua/diloco/replay.lua) reproduces the run's final
-- global parameters bit for bit; a changed tape or model is caught, and what replay
-- cannot re-execute is refused by name.  A tiny GPT, so each run takes seconds.
local H = require "spec.helpers"
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end

local function recipe(S, name, o)
  o = o or {}
  return H.tiny_recipe(S, name, { steps = o.steps or 300, eval = { every = 0, batches = 2 }, chaos = o.chaos,
    sync = { preset = o.preset or "decoupled", H = 16, fragments = o.fragments or 2, tau = o.tau or 1,
      codec = o.codec or "f32", error_feedback = o.error_feedback } })
end

local function run(S, path, out)
  local text, code = H.sh(string.format("%s run %s --out %s --quiet 2>&1", exe, path, out))
  assert.are.equal(0, code, text)
end

local function replay(out, extra)
  return H.sh(string.format("%s sim --replay %s %s 2>&1", exe, out, extra or ""))
end

local function copy_run(from, to)
  local _, code = H.sh(string.format("cp -r %s %s", from, to))
  assert.are.equal(0, code)
end

-- Rewrites a JSON-lines file with fn(record) -> record (nil: drop it).
local function rewrite(path, fn)
  local out = {}
  for _, line in ipairs(H.read_lines(path)) do
    local e = fn(diloco.json_decode(line))
    if e then out[#out + 1] = diloco.json_encode(e) end
  end
  local f = assert(io.open(path, "w"))
  f:write(table.concat(out, "\n"), "\n")
  f:close()
end

describe("sim --replay of a finished run", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("reproduces a run whose uplink is sparse (sparse2, error feedback) bit for bit", function()
    local out = S.dir .. "/run"
    run(S, recipe(S, "sparse", { codec = "sparse2", error_feedback = true, steps = 200 }), out)
    local merges = 0
    for _, line in ipairs(H.read_lines(out .. "/metrics.jsonl")) do
      if line:find('"event":"merge"', 1, true) then merges = merges + 1 end
    end
    assert.is_true(merges > 0, "merges")
    -- the contributions a twentieth of what f32 fragments (of 2) would have been, or less
    local sum = H.summary_of(H.events(out .. "/metrics.jsonl"))
    local sent = 0
    for _, l in ipairs(sum.per_learner) do sent = sent + l.merged end
    assert.is_true(sum.bytes_by_type.contribution.up * 20 < sent * sum.params / 2 * 4,
      diloco.json_encode(sum.bytes_by_type.contribution))
    local text, code = replay(out, "--quiet")
    assert.are.equal(0, code, text)
    local s = diloco.json_decode(text:match("{.*}"))
    assert.is_true(s.identical)
  end)

  it("reproduces a 2-learner decoupled run's final parameters bit for bit, and catches a changed float", function()
    local out = S.dir .. "/run"
    -- learner 2 a fifth slower: the learners drift out of phase, and catch up (phase records)
    run(S, recipe(S, "dec", { codec = "int4", chaos = '{ { at = 0, slow = 2, factor = 1.2 } }' }), out)
    local phases = 0
    for m = 1, 2 do
      for _, line in ipairs(H.read_lines(string.format("%s/learner-%d/metrics.jsonl", out, m))) do
        if line:find('"event":"phase"', 1, true) then phases = phases + 1 end
      end
    end
    assert.is_true(phases > 0, "a learner caught up")
    -- the merges of the run took contributions from both learners
    local seen = {}
    for _, line in ipairs(H.read_lines(out .. "/metrics.jsonl")) do
      local e = diloco.json_decode(line)
      if e.event == "merge" then
        for _, c in ipairs(e.contributors) do
          seen[c.learner] = true
          assert.is_number(c.base_version)
          assert.is_number(c.incarnation)
        end
      end
    end
    assert.is_true(seen[1] and seen[2], "both learners merged")
    local text, code = replay(out, "--quiet")
    assert.are.equal(0, code, text)
    local s = diloco.json_decode(text:match("{.*}"))
    assert.is_true(s.identical)
    assert.are.equal(0, s.differing)
    -- every inner step the learners ran (fewer than 2 x 300 when a learner caught up)
    local ran = 0
    for m = 1, 2 do
      local ls = H.read_lines(string.format("%s/learner-%d/metrics.jsonl", out, m))
      ran = ran + diloco.json_decode(ls[#ls]).steps
    end
    assert.are.equal(ran, s.steps)
    assert.is_true(s.merges > 20, "merges " .. tostring(s.merges))
    -- one float of the run's model one or two ulps off: no longer bit for bit
    local bad = S.dir .. "/bad"
    copy_run(out, bad)
    local t, meta = diloco.load_safetensors(bad .. "/model.safetensors")
    assert.is_table(t, meta)
    local names = {}
    for name in pairs(t) do names[#names + 1] = name end
    table.sort(names)
    local w = t[names[1]]
    local idx = {}
    for d = 1, #w:size() do idx[d] = 1 end
    local v = w:get(table.unpack(idx))
    w:set(v + math.abs(v) * 2 ^ -22 + 1e-30, table.unpack(idx))
    assert.are_not.equal(v, w:get(table.unpack(idx)))
    local list = {}
    for _, name in ipairs(names) do list[#list + 1] = { name, t[name] } end
    assert.is_true(diloco.save_safetensors(bad .. "/model.safetensors", list, meta))
    text, code = replay(bad)
    assert.are.equal(1, code, text)
    assert.matches("differ from .* in 1 of %d+ floats", text)
  end)

  it("reproduces data-parallel and blocking runs, and names where a changed tape diverges", function()
    local out = S.dir .. "/dp"
    run(S, recipe(S, "dp", { preset = "dp", fragments = 1, steps = 80 }), out)
    local text, code = replay(out)
    assert.are.equal(0, code, text)
    assert.matches("match .* bit for bit", text)
    -- blocking DiLoCo with tau = 0: each merge is applied at the boundary whose step sent it
    local blk = S.dir .. "/blk"
    run(S, recipe(S, "blk", { preset = "diloco", tau = 0, steps = 96 }), blk)
    text, code = replay(blk)
    assert.are.equal(0, code, text)
    assert.matches("match .* bit for bit", text)
    -- a decoupled run whose learner 1 applied one merge a step later than its tape says
    local dec = S.dir .. "/dec"
    run(S, recipe(S, "dec2"), dec)
    local moved = false
    rewrite(dec .. "/learner-1/metrics.jsonl", function(e)
      if not moved and e.event == "apply" and not e.resync and e.boundary > 20 then
        e.boundary, moved = e.boundary + 1, true
      end
      return e
    end)
    assert.is_true(moved)
    text, code = replay(dec)
    assert.are.equal(1, code, text)
    -- caught where a contribution or merge no longer fits the tape, else in the end result
    assert.is_truthy(text:find("diverged from the tape", 1, true) or text:find("parameters differ from", 1, true), text)
  end)

  it("refuses what it cannot re-execute, naming why", function()
    local out = S.dir .. "/run"
    local path = recipe(S, "ref", { steps = 60 })
    run(S, path, out)
    -- a learner whose process restarted (a second join)
    local two = S.dir .. "/two"
    copy_run(out, two)
    rewrite(two .. "/learner-2/metrics.jsonl", function(e) return e end)
    local f = assert(io.open(two .. "/learner-2/metrics.jsonl", "a"))
    f:write(diloco.json_encode({ event = "join", learner = 2, step = 30 }), "\n")
    f:close()
    local text, code = replay(two)
    assert.are.equal(2, code, text)
    assert.matches("learner 2 joined 2 times", text)
    -- a room record that is not one
    local room = S.dir .. "/room"
    copy_run(out, room)
    local fr = assert(io.open(room .. "/learner-1/metrics.jsonl", "a"))
    fr:write(diloco.json_encode({ event = "room", learner = 1, boundary = 3, room = -3 }), "\n")
    fr:close()
    text, code = replay(room)
    assert.are.equal(2, code, text)
    assert.matches("a room record with room = %-3 at boundary 3", text)
    -- the recipe file changed since the run
    local changed = S.dir .. "/changed.lua"
    local src = assert(io.open(path)):read("a")
    local g = assert(io.open(changed, "w"))
    g:write((src:gsub("lr = 3e%-3", "lr = 2e-3")))
    g:close()
    text, code = replay(out, changed)
    assert.are.equal(2, code, text)
    assert.matches("recipe.json differs at inner.lr", text)
    -- not a run of several islands; options that do not apply
    text, code = replay(S.dir)
    assert.are.equal(2, code, text)
    assert.matches("tape.json is missing", text)
    text, code = replay(out, "--out " .. S.dir .. "/x")
    assert.are.equal(2, code, text)
    assert.matches("%-%-out does not apply", text)
  end)
end)
