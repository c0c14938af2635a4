-- chaos: Decoupled DiLoCo under failures, on the virtual-time driver.  Each of four
-- islands fails at random (exponential time between failures, mean 60 virtual seconds)
-- and stays down 15 s, so each is down about 20% of the time (15 / (60 + 15); the shares
-- drawn with seed 7 are in docs/experiments.md); the seeded schedule is the same on every
-- run.  A failed island only stops itself: the others keep training, the syncer merges
-- whoever sends (quorum 1), and the island comes back with the whole global model and a
-- fresh optimizer, in step with the others.  Compare goodput, uptime and the final loss with
-- the blocking baseline:
--   diloco-lua sim recipes/chaos.lua
--   diloco-lua sim recipes/chaos.lua --set sync.preset=diloco
-- A scripted timeline works too (see docs/recipes.md, "chaos"):
--   chaos = { { at = "100s", kill = 2, down = "60s" }, { at = "300s", syncer = "down", down = "20s" } }
local diloco = require "diloco"

-- The run is recipes/decoupled.lua's, read from beside this file: charlm's GPT, data and
-- AdamW, the Nesterov outer step, sync.preset = "decoupled" (H = 24, 4 fragments, tau = 2,
-- quorum 1), four islands a virtual second per step on 20 ms, 2.5 Gbps links, 750 steps, an
-- eval every 125.  The failures are this recipe's.  A recipe is Lua: it may build on
-- another like this, the file's table and then the fields that differ (docs/recipes.md).
-- To copy this recipe elsewhere, copy decoupled.lua beside it, or write its fields into a
-- diloco.recipe { ... } here.  Only the run's failures are set below, and a hook that says
-- when an island goes down and comes back.
local r = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "decoupled.lua")
r.chaos = diloco.chaos.poisson { mtbf = "60s", down = "15s", seed = 7 }
r.hooks = {
  on_fault = function(info)
    if info.kind == "kill" then
      io.stderr:write(string.format("%.0fs: island %d %s\n", info.virtual_s, info.learner,
        info.begin and "went down" or "is back"))
    end
  end,
}
return r
