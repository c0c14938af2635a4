-- Islands of several MPI ranks (docs/mpi.md, lua/lmpi.c, lua/diloco/learner.lua): data
-- parallel inside an island, one mpirun job per island, TCP to the syncer.  A tiny GPT,
-- so each run takes seconds; every test kills only the pids it started (the ranks of
-- an mpirun `run` started, through its chaos).
local H = require "spec.helpers"
local events, of_kind, summary_of = H.events, H.of_kind, H.summary_of
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end
local sanitized = os.getenv("DILOCO_SANITIZED") == "1"
local have_mpirun = select(2, H.sh("command -v mpirun")) == 0
-- mpirun as root (CI) needs its consent; one thread per rank
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "
  .. "timeout -s KILL 120 mpirun --oversubscribe --bind-to none"

local function skip_why()
  if not diloco.mpi.available then return diloco.mpi.why end
  if not have_mpirun then return "mpirun not found: install openmpi-bin (scripts/setup does)" end
end

local function recipe(S, name, o)
  return S.write(name .. ".lua", string.format([[
local diloco = require "diloco"
return diloco.recipe {
  name = %q,
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%%", ctx = 16, batch = %d },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = %q, H = %d, fragments = 2, tau = 1 },
  islands = %s,
  runtime = { heartbeat = "0.5s", timeout = "3s", drain = "10s" },
  steps = %d,
  eval = { every = 0, batches = 4 },
  chaos = %s,
}
]], name, o.batch or 8, o.preset or "decoupled", o.H or 16, o.islands, o.steps, o.chaos or "nil"))
end

-- The largest |a - b| / max(1, |a|) over the model tensors of two safetensors files.
local function max_rel_diff(a, b)
  local ta, tb = assert(diloco.load_safetensors(a)), assert(diloco.load_safetensors(b))
  local worst, n = 0, 0
  for name, t in pairs(ta) do
    if not name:match("^adamw%.") then
      local u = assert(tb[name], name)
      assert.are.same(t.shape, u.shape, name)
      local function walk(x, y)
        if type(x) == "table" then
          for i = 1, #x do walk(x[i], y[i]) end
        else
          worst = math.max(worst, math.abs(x - y) / math.max(1, math.abs(x)))
        end
      end
      walk(t:tolist(), u:tolist())
      n = n + 1
    end
  end
  assert.is_true(n > 4, "tensors compared")
  return worst
end

describe("an island of several MPI ranks", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("of 2 ranks trains as one learner with 2x the batch: within 1e-5 after 20 steps", function()
    local why = skip_why()
    if why then return pending(why) end
    -- blocking diloco with one learner: the same merges at the same steps in both runs
    local big = recipe(S, "big", { preset = "diloco", H = 10, batch = 16, islands = "{ count = 1 }", steps = 20 })
    local two = recipe(S, "two", { preset = "diloco", H = 10, batch = 8, islands = "{ { ranks = 2 } }", steps = 20 })
    local secret = S.write("secret", "s3cret\n")
    local function go(path, tag, launcher)
      local cmd = string.format("cd %s && (%s syncer %s --listen 127.0.0.1:0 --address-file %s/addr-%s --secret-file %s "
        .. "--out %s/run-%s --quiet > %s/syncer-%s.log 2>&1 &) && %s %s learner %s --connect @%s/addr-%s --id 1 "
        .. "--secret-file %s --out %s/%s --overwrite --quiet", S.dir, exe, path, S.dir, tag, secret, S.dir, tag, S.dir,
        tag, launcher, exe, path, S.dir, tag, secret, S.dir, tag)
      local out, code = H.sh(cmd)
      assert.are.equal(0, code, out)
      return summary_of(events(string.format("%s/%s/metrics.jsonl", S.dir, tag)))
    end
    local one = go(big, "one", "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1")
    local isl = go(two, "isl", MPIRUN .. " -np 2")
    assert.are.equal(2, isl.ranks)
    assert.is_true(isl.ranks_same, "every rank ended with rank 0's parameters")
    assert.are.equal(one.tokens, isl.tokens) -- 2 x 8 rows of 16 tokens a step
    assert.are.equal(one.applied, isl.applied)
    assert.is_true(isl.applied > 0, "merges applied")
    local d = max_rel_diff(S.dir .. "/one/checkpoint-00000020.safetensors",
      S.dir .. "/isl/checkpoint-00000020.safetensors")
    assert.is_true(d <= 1e-5, "largest relative difference " .. d)
    -- the syncer, started by hand, counts the island's steps, not its ranks' batches (it
    -- knows the tokens of a step from the contributions): 20, and goodput at most 1
    for _, tag in ipairs { "one", "isl" } do
      local path, t0 = string.format("%s/run-%s/metrics.jsonl", S.dir, tag), diloco.clock()
      while diloco.clock() - t0 < 60 do -- the syncer's end, after its learner's
        local ev = events(path)
        if #ev > 0 and ev[#ev].event == "summary" then break end
        diloco.proc.sleep(0.05)
      end
      local s = summary_of(events(path))
      assert.are.equal(20, s.steps, tag)
      assert.is_true(s.goodput > 0 and s.goodput <= 1, tag .. ": goodput " .. tostring(s.goodput))
    end
  end)

  it("under run: two islands of 2 ranks complete with merges from both", function()
    local why = skip_why()
    if why then return pending(why) end
    local path = recipe(S, "pair", { islands = "{ { ranks = 2 }, { ranks = 2 } }", steps = sanitized and 100 or 200 })
    local out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local s = summary_of(events(S.dir .. "/run/metrics.jsonl"))
    assert.are.equal(2, s.learners)
    for m = 1, 2 do
      assert.is_true(s.per_learner[m].merged > 0, "island " .. m .. " merged")
      local ls = summary_of(events(string.format("%s/run/learner-%d/metrics.jsonl", S.dir, m)))
      assert.are.equal(2, ls.ranks)
      assert.are.equal(2, s.per_learner[m].ranks)
      assert.is_true(ls.ranks_same, "island " .. m .. ": its ranks ended the same")
      assert.are.equal(ls.steps * 2 * 8 * 16, ls.tokens)
    end
    assert.is_true(s.final_eval_loss < 5.3, "final eval loss " .. tostring(s.final_eval_loss))
  end)

  it("killed in one rank ends its job at once; the other island trains on; it rejoins and contributes", function()
    local why = skip_why()
    if why then return pending(why) end
    -- (the kill comes once the island has joined: an mpirun job of two sanitizer-built
    -- ranks beside other tests takes seconds to start)
    local path = recipe(S, "kill", { islands = "{ { ranks = 2 }, { ranks = 2 } }", steps = sanitized and 6000 or 3000,
      chaos = sanitized and '{ { at = "6s", kill = 1, rank = 1, down = "1s" } }'
        or '{ { at = "1.5s", kill = 1, rank = 1, down = "1s" } }' })
    local out, code = H.sh(string.format("%s run %s --out %s/run --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local ev = events(S.dir .. "/run/metrics.jsonl")
    local s = summary_of(ev)
    local kill = of_kind(ev, "fault", "kill")
    assert.are.equal(2, #kill, "the kill and its end")
    assert.are.equal(1, kill[1].rank)
    -- the island's job ended with the rank: the syncer lost island 1 well inside runtime.timeout (3 s)
    local lost = of_kind(ev, "fault", "lost")
    assert.is_true(#lost >= 1, "island 1 lost")
    assert.are.equal(1, lost[1].learner)
    assert.is_true(lost[1].wall_s - kill[1].wall_s < 1.5, "lost " .. (lost[1].wall_s - kill[1].wall_s) .. " s after")
    -- restarted after its down time, it rejoined and a contribution of it was merged again
    local rec = of_kind(ev, "fault", "recovered")
    assert.is_true(#rec >= 1 and rec[1].learner == 1, "island 1 recovered")
    local after = false
    for _, m in ipairs(of_kind(ev, "merge")) do
      if m.wall_s and m.wall_s > rec[1].wall_s then
        for _, c in ipairs(m.contributors) do after = after or c.learner == 1 end
      end
    end
    assert.is_true(after, "island 1 contributed after its restart")
    -- the other island never waited
    assert.is_true(s.idle[2] <= 0.02, "island 2 idle share " .. tostring(s.idle[2]))
    assert.are.equal(0, s.per_learner[2].crashes)
  end)

  it("under run, stopped by SIGTERM: rank 0 stops its ranks, the island ends its step and says so", function()
    local why = skip_why()
    if why then return pending(why) end
    local path = recipe(S, "stop", { islands = "{ { ranks = 2 }, { } }", steps = 1000000 })
    local out = S.dir .. "/run"
    local pid = assert(diloco.proc.spawn { exe, "run", path, "--out", out, "--quiet",
      stdout = S.dir .. "/run.out", stderr = S.dir .. "/run.err" })
    H.await_or_kill(pid, 60, "10 merges", function() return H.count_events(out .. "/metrics.jsonl", "merge") >= 10 end)
    assert(diloco.proc.signal(pid, "TERM"))
    local st = diloco.proc.wait(pid, true)
    assert.are.equal(143, st.exited, table.concat(H.read_lines(S.dir .. "/run.err"), "\n"))
    local s = summary_of(events(out .. "/metrics.jsonl"))
    assert.is_true(s.interrupted)
    assert.is_number(s.final_eval_loss)
    local ls = summary_of(events(out .. "/learner-1/metrics.jsonl"))
    assert.is_true(ls.interrupted, "island 1 stopped by the signal, not killed")
    assert.are.equal(2, ls.ranks)
    assert.is_true(ls.ranks_same, "its ranks stopped together, the same")
  end)

  it("in sim trains as one learner with R x the batch, at its own batch's step time (no MPI needed)", function()
    local path = recipe(S, "sim", { islands = "{ { ranks = 2 }, { } }", steps = 20 })
    local out, code = H.sh(string.format("%s sim %s --out %s/sim --quiet", exe, path, S.dir))
    assert.are.equal(0, code, out)
    local s = summary_of(events(S.dir .. "/sim/metrics.jsonl"))
    assert.are.equal(s.per_learner[2].steps, s.per_learner[1].steps)
    assert.are.equal(2 * s.per_learner[2].tokens, s.per_learner[1].tokens)
  end)

  it("is refused with what was wrong: ranks without mpirun, a size that differs, dp", function()
    local why = skip_why()
    if why then return pending(why) end
    local path = recipe(S, "bad", { islands = "{ { ranks = 2 }, { } }", steps = 10 })
    local secret = S.write("secret", "s3cret\n")
    local out, code = H.sh(string.format("%s learner %s --connect 127.0.0.1:9 --id 1 --secret-file %s --out %s/l",
      exe, path, secret, S.dir))
    assert.are.equal(2, code, out)
    assert.matches("islands[1].ranks = 2: start this island as one MPI job of 2 ranks", out, 1, true)
    out, code = H.sh(string.format("cd %s && %s -np 3 %s learner %s --connect 127.0.0.1:9 --id 1 --secret-file %s "
      .. "--out %s/l", S.dir, MPIRUN, exe, path, secret, S.dir))
    assert.are_not.equal(0, code, out)
    assert.matches("islands[1].ranks = 2 but the launcher started 3 ranks", out, 1, true)
    local dp = recipe(S, "dp", { preset = "dp", islands = "{ { ranks = 2 }, { } }", steps = 10 })
    out, code = H.sh(string.format("%s run %s --out %s/dp", exe, dp, S.dir))
    assert.are.equal(2, code, out)
    assert.matches("islands[1].ranks = 2: islands of several ranks run the DiLoCo presets", out, 1, true)
    local rk = recipe(S, "rk", { islands = "{ { ranks = 2 }, { } }", steps = 10,
      chaos = '{ { at = "1s", kill = 2, rank = 1 } }' })
    out, code = H.sh(string.format("%s run %s --out %s/rk", exe, rk, S.dir))
    assert.are.equal(2, code, out)
    assert.matches("chaos[1].rank = 1: island 2 has 1 rank: expected a rank in [0, 0]", out, 1, true)
  end)
end)

-- What `run` uses to keep an mpirun job tied to it and to reach its ranks (lua/lproc.c).
describe("diloco.proc for a job's ranks", function()
  it("ties a child to its parent (parent_death), lists its children, signals only those", function()
    local S = H.scratch()
    local mid = S.write("mid.lua", [[
local d = require "diloco"
local pid = assert(d.proc.spawn { "/bin/sleep", "30", parent_death = "KILL" })
local f = assert(io.open(arg[1], "w"))
f:write(pid, "\n")
f:close()
d.proc.sleep(30)
]])
    local pidfile = S.dir .. "/sleep.pid"
    local parent = assert(diloco.proc.spawn { exe, mid, pidfile })
    local t0, grand = diloco.clock(), nil
    while not grand and diloco.clock() - t0 < 20 do
      local f = io.open(pidfile)
      grand = f and math.tointeger(tonumber(f:read("l") or ""))
      if f then f:close() end
      if not grand then diloco.proc.sleep(0.02) end
    end
    assert.is_number(grand, "the middle process started its child")
    local kids = diloco.proc.children(parent)
    assert.are.same({ grand }, kids)
    -- a pid that is not its child is refused, named
    local ok, err = diloco.proc.signal_grandchild(parent, diloco.proc.pid(), "CONT")
    assert.is_nil(ok)
    assert.matches("is not a child of pid " .. parent, err, 1, true)
    assert.is_true(diloco.proc.signal_grandchild(parent, grand, "CONT"))
    -- the middle process dies: the kernel kills its tied child
    diloco.proc.signal(parent, "KILL")
    diloco.proc.wait(parent, true)
    local function alive(pid)
      local f = io.open("/proc/" .. pid .. "/stat")
      if not f then return false end
      local st = f:read("a"):match("%) (%a)")
      f:close()
      return st ~= "Z" and st ~= "X"
    end
    t0 = diloco.clock()
    while alive(grand) and diloco.clock() - t0 < 5 do diloco.proc.sleep(0.02) end
    S.cleanup()
    assert.is_false(alive(grand), "the tied child outlived its parent")
    -- a program that is missing is an error, not a child that never runs
    local pid, why = diloco.proc.spawn { "/nonexistent/prog", parent_death = "KILL" }
    assert.is_nil(pid)
    assert.matches("cannot start /nonexistent/prog", why, 1, true)
  end)
end)

