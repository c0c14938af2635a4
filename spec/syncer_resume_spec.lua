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
  return S.write(name .. ".lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = %q,
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 16, batch = 8 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "decoupled", H = 8, fragments = 2, tau = 1 },
  islands = { count = 2 },
  runtime = { heartbeat = "0.5s", timeout = "3s", drain = "10s", join_timeout = "2s", syncer_every = %d },
  steps = %d,
  chaos = %s,
}
]], name, o.syncer_every or 5, o.steps or 200, o.chaos or "nil"))
end

-- The lines of a file, and the file rewritten with lines 1..n of them.
local function truncate_lines(path, n)
  local lines = H.read_lines(path)
  local f = assert(io.open(path, "w"))
  for i = 1, n do f:write(lines[i], "\n") end
  f:close()
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
    -- said on stderr under --quiet: which checkpoint, how many merges lost
    assert.matches("resumed from " .. newest.path .. " (" .. newest.step .. " merges): no merges lost", out, 1, true)
  end)
end)
