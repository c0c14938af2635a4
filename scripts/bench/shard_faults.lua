-- scripts/bench/shard_faults.lua, run by scripts/bench/shard_faults: one recipe under
-- `run` three times, side by side in one invocation: with no syncer fault; with the whole
-- syncer down for DOWN every PERIOD (a chaos `syncer` event: every fragment's rounds stop,
-- the syncer comes back from its newest checkpoint, saved every 4 merges); and with the
-- syncer in two shards
-- (islands.syncers = 2), one shard down for DOWN every PERIOD, the shards in turn (its
-- fragments' rounds stop, the other shard merges on; docs/shards.md).  The recipe must
-- have at least two fragments.  Prints each run's goodput, uptime, merges, merges lost,
-- final eval loss and wall time, and the goodput of each faulty run as a share of the
-- no-fault run's.  The faults are chaos events in the run's process (the shards of a
-- run share it): a driver closed and started again, not a process killed.
-- Usage: diloco-lua scripts/bench/shard_faults.lua RECIPE OUTDIR [PERIOD_S [DOWN_S [HORIZON_S]]]
local diloco = require "diloco"
local recipe, tmp = assert(arg[1], "RECIPE"), assert(arg[2], "OUTDIR")
local period, down, horizon = tonumber(arg[3] or "20"), tonumber(arg[4] or "5"), tonumber(arg[5] or "600")
local exe = diloco.proc.self_exe()
local base = diloco.proc.realpath(recipe) or recipe

-- A recipe file wrapping RECIPE: islands.syncers and chaos events added.
local function variant(name, syncers, shard_faults)
  local events = {}
  if shard_faults ~= nil then
    local k = 0
    for t = period, horizon, period do
      k = k + 1
      events[#events + 1] = string.format('{ at = "%gs", syncer = "down", down = "%gs"%s }', t, down,
        shard_faults and string.format(", shard = %d", (k - 1) % 2 + 1) or "")
    end
  end
  local path = string.format("%s/%s.lua", tmp, name)
  local f = assert(io.open(path, "w"))
  f:write(string.format("local r = dofile(%q)\n", base))
  -- a checkpoint (set) every 4 merges: a syncer or shard brought back loses a few merges,
  -- not every one since the start
  f:write("r.runtime = r.runtime or {}\nr.runtime.syncer_every = 4\n")
  if syncers then f:write(string.format("r.islands.syncers = %d\n", syncers)) end
  if #events > 0 then f:write("r.chaos = { ", table.concat(events, ", "), " }\n") end
  f:write("return r\n")
  f:close()
  return path
end

local runs = {
  { name = "no syncer fault", path = variant("none", nil, nil) },
  { name = string.format("the syncer down %gs every %gs", down, period), path = variant("whole", nil, false) },
  { name = string.format("2 shards, one down %gs every %gs", down, period), path = variant("shards", 2, true) },
}
for i, r in ipairs(runs) do
  local out = string.format("%s/run-%d", tmp, i)
  local p = io.popen(string.format("OMP_NUM_THREADS=1 %s run %s --out %s --quiet 2>%s/run-%d.log", exe, r.path, out,
    tmp, i))
  local text = p:read("a")
  p:close()
  local last = text:match("([^\n]+)%s*$")
  local ok, s = pcall(diloco.json_decode, last or "")
  if not ok or type(s) ~= "table" or s.error ~= diloco.json_null and s.error then
    error(string.format("%s: the run failed (%s/run-%d.log): %s", r.name, tmp, i, ok and tostring(s.error) or text), 0)
  end
  r.s = s
end
local np = io.popen("nproc")
local cores = np:read("l") or "?"
np:close()
print(string.format("%s under run, %d learners; OPENBLAS_CORETYPE=%s, %s cores", recipe, runs[1].s.learners,
  os.getenv("OPENBLAS_CORETYPE") or "-", cores))
print("| run | goodput | ÷ no-fault | uptime | merges | merges lost | final eval loss | wall s |")
print("|---|---|---|---|---|---|---|---|")
local g0 = runs[1].s.goodput
for _, r in ipairs(runs) do
  local s = r.s
  print(string.format("| %s | %.1f%% | %.3f | %s | %d | %d | %.4f | %.1f |", r.name, 100 * s.goodput, s.goodput / g0,
    type(s.uptime) == "number" and string.format("%.1f%%", 100 * s.uptime) or "-", s.merges, s.merges_lost or 0,
    s.final_eval_loss, s.wall_s))
end
