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

return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%", ctx = 64, batch = 16 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, schedule = "cosine", min_lr = 3e-4, clip = 1.0 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  sync = { preset = "decoupled" }, -- H = 24, 4 fragments, tau = 2, quorum 1 (the preset's)
  islands = { count = 4, step_time = "1s", latency = "20ms", bandwidth = "2.5Gbps" },
  chaos = diloco.chaos.poisson { mtbf = "60s", down = "15s", seed = 7 },
  steps = 750,
  eval = { every = 125, batches = 32 },
  hooks = {
    on_fault = function(info)
      if info.kind == "kill" then
        io.stderr:write(string.format("%.0fs: island %d %s\n", info.virtual_s, info.learner,
          info.begin and "went down" or "is back"))
      end
    end,
  },
}
