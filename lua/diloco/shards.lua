-- diloco.shards: the end of a sharded syncer's first shard (docs/shards.md).  Each shard
-- saves a model that holds the global values of its own fragments only; shard 1 then waits
-- for the run's other shards (OUT/shard-K beside its own OUT/shard-1, on one file system)
-- to end, and assembles the run's global model from each shard's fragments, which it
-- evaluates and saves as OUT/model.safetensors.
local diloco = require "diloco"
local M = {}

-- The summary line of the metrics at path, nil while there is none (a shard not ended).
local function summary_of(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local last
  for line in f:lines() do
    if line:find('"event":"summary"', 1, true) then last = line end
  end
  f:close()
  if not last then return nil end
  local ok, ev = pcall(diloco.json_decode, last)
  return ok and ev or nil
end

-- The directory of shard k of the run whose shard directory is `out` (".../shard-I").
function M.dir(out, k)
  local root = out:match("^(.*)/shard%-%d+$") or out
  return string.format("%s/shard-%d", root, k), root
end

-- Puts the other shards' fragments into ctx.params, which holds this shard's (the global
-- model of its own fragments).  Waits up to wait_s for each shard's summary.  Returns the
-- run's directory, and the list of what could not be taken ("shard 2: ... ") or nil.
function M.assemble(ctx, wait_s, stopped)
  local S, I = ctx.opts.shards, ctx.opts.shard
  local owner = ctx.plan:deal(S)
  local _, root = M.dir(ctx.out, I)
  local problems = {}
  local deadline = diloco.clock() + wait_s
  for k = 1, S do
    if k ~= I then
      local dir = M.dir(ctx.out, k)
      local sum = summary_of(dir .. "/metrics.jsonl")
      while not sum and diloco.clock() < deadline and not (stopped and stopped()) do
        diloco.proc.sleep(0.1)
        sum = summary_of(dir .. "/metrics.jsonl")
      end
      local t = sum and sum.run_id == ctx.run_id and diloco.load_safetensors(dir .. "/model.safetensors")
      if not sum then
        problems[#problems + 1] = string.format("shard %d: no summary in %s/metrics.jsonl within %g s", k, dir, wait_s)
      elseif sum.run_id ~= ctx.run_id then
        problems[#problems + 1] = string.format("shard %d: %s is run %s, this is run %s", k, dir, tostring(sum.run_id),
          ctx.run_id)
      elseif not t then
        problems[#problems + 1] = string.format("shard %d: no model in %s", k, dir)
      else
        local list = {}
        for i, p in ipairs(ctx.plist) do
          local src = t[p[1]]
          if not src or src.numel ~= p[2].numel then
            problems[#problems + 1] = string.format("shard %d: its model lacks tensor %s or its shape differs", k, p[1])
            list = nil
            break
          end
          list[i] = { p[1], src }
        end
        if list then -- laid out as ctx.params (same tensors, same order): the views index both
          local other = diloco.Params(list)
          local from, to = other:flat(), ctx.params:flat()
          for f = 1, #ctx.plan do
            if owner[f] == k then
              for _, v in ipairs(ctx.plan:views(f)) do
                to:slice(1, v.offset + 1, v.offset + v.numel):copy(from:slice(1, v.offset + 1, v.offset + v.numel))
              end
            end
          end
          other:close()
        end
      end
    end
  end
  return root, #problems > 0 and problems or nil
end

return M
