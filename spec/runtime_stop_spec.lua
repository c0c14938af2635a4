-- Ctrl-C and SIGTERM to `diloco-lua run` with learner processes: the learners finish their
-- step, the last contributions are merged, the global model is evaluated and saved, every
-- process exits, and the exit status is 128 + N as for one island; the stopped run is still
-- a tape that `sim --replay` reproduces bit for bit.  Kills only the pid it started.
local H = require "spec.helpers"
local events = H.events
local diloco = require "diloco"

local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
if exe:sub(1, 1) ~= "/" then exe = (H.sh("pwd")):match("[^\n]+") .. "/" .. exe end

local function recipe(S)
  return S.write("stop.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  name = "stop",
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%", ctx = 16, batch = 8 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "decoupled", H = 16, fragments = 2, tau = 1 },
  islands = { count = 2 },
  runtime = { heartbeat = "0.5s", timeout = "3s", drain = "10s" },
  steps = 1000000,
  eval = { every = 0, batches = 2 },
}
]])
end

-- Starts the run, waits for its first merges, sends sig, returns the exit status and OUT.
local function stopped_run(S, sig, name)
  local out = S.dir .. "/" .. name
  local pid = assert(diloco.proc.spawn { exe, "run", recipe(S), "--out", out, "--quiet",
    stdout = S.dir .. "/" .. name .. ".out", stderr = S.dir .. "/" .. name .. ".err" })
  H.await_or_kill(pid, 60, "20 merges", function() return H.count_events(out .. "/metrics.jsonl", "merge") >= 20 end)
  assert(diloco.proc.signal(pid, sig))
  local st = diloco.proc.wait(pid, true)
  return st, out
end

describe("diloco-lua run with learner processes, stopped by a signal", function()
  local S
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  for _, case in ipairs { { sig = "TERM", code = 143 }, { sig = "INT", code = 130 } } do
    it("stops everything cleanly on SIG" .. case.sig .. " and exits " .. case.code, function()
      local st, out = stopped_run(S, case.sig, "run")
      assert.are.equal(case.code, st.exited, table.concat(H.read_lines(S.dir .. "/run.err"), "\n"))
      local ev = events(out .. "/metrics.jsonl")
      local s = ev[#ev]
      assert.are.equal("summary", s.event)
      assert.is_true(s.interrupted)
      assert.is_nil(s.error)
      assert.is_number(s.final_eval_loss) -- the global model was evaluated ...
      local t = diloco.load_safetensors(out .. "/model.safetensors")
      assert.is_table(t)                   -- ... and saved
      for m = 1, 2 do                       -- every learner finished its step and said so
        local le = events(string.format("%s/learner-%d/metrics.jsonl", out, m))
        local ls = le[#le]
        assert.are.equal("summary", ls.event)
        assert.is_true(ls.interrupted, "learner " .. m)
        assert.is_nil(ls.error)
        assert.are.equal("stopped", s.per_learner[m].state, "learner " .. m)
      end
      if case.sig == "TERM" then -- a stopped run is a tape like any other
        local text, code = H.sh(string.format("%s sim --replay %s 2>&1", exe, out))
        assert.are.equal(0, code, text)
        assert.matches("bit for bit", text)
      end
    end)
  end
end)
