-- mixed: mixed hardware.  Two fast islands and two at half their speed train the charlm
-- GPT with Decoupled DiLoCo on the virtual-time driver.  Nobody waits for the slow ones:
-- with quorum 1 and the adaptive grace window (docs/algorithm.md §4.3) a fragment merges as
-- soon as one island sent it and the window closes before anyone needs the result; the
-- tokens^2/steps weights give each island's contribution the weight of the work in it.
--   diloco-lua sim recipes/mixed.lua
--   diloco-lua sim recipes/mixed.lua --set sync.quorum=all     # the blocking comparison
-- Compare the summary's idle shares (one per island) and the virtual time to a loss.
local diloco = require "diloco"

return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%", ctx = 64, batch = 16 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, schedule = "cosine", min_lr = 3e-4, clip = 1.0 },
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  -- the preset fills the rest (decoupled: H = 24, 4 fragments, tau = 2, quorum 1, adaptive
  -- grace, tokens^2/steps, RDA); set only what differs, so --set sync.preset=... switches all
  sync = { preset = "decoupled" },
  -- islands 1 and 2 run a step per virtual second, 3 and 4 one every two seconds
  islands = { { speed = 1 }, { speed = 1 }, { speed = 0.5 }, { speed = 0.5 },
    step_time = "1s", latency = "20ms", bandwidth = "2.5Gbps" },
  steps = 1000,            -- 1000 virtual seconds: 1000 steps for a fast island, 500 for a slow one
  eval = { every = 100, batches = 32 },
  hooks = {
    -- print who entered each merge of fragment 1 (a recipe may script anything here)
    on_merge = function(info)
      if info.fragment == 1 and info.version % 10 == 0 then
        local who = {}
        for _, c in ipairs(info.contributors) do who[#who + 1] = string.format("%d(%.2g)", c.learner, c.weight) end
        io.stderr:write(string.format("fragment 1 v%d at %.0fs: %s\n", info.version, info.virtual_s,
          table.concat(who, " ")))
      end
    end,
  },
}
