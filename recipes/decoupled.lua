-- decoupled: recipes/charlm.lua's byte-level GPT trained by four islands with Decoupled
-- DiLoCo (docs/algorithm.md §4) on the virtual-time driver: each island trains on its own
-- quarter of the fortunes corpus and never waits for another; the syncer merges each of
-- the 4 fragments as soon as one island has sent it (quorum 1), waits an adaptive grace
-- window for more, weighs contributions by tokens^2/steps and merges them by RDA.
--   diloco-lua sim recipes/decoupled.lua [--set sync.preset=diloco] [--set sync.codec=int4]
--   diloco-lua sample runs/decoupled/model.safetensors --prompt "The "
-- Equal token budget: 4 islands x 750 steps x 1024 tokens = charlm's 3000 x 1024.
local diloco = require "diloco"

return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%", ctx = 64, batch = 16 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, schedule = "cosine", min_lr = 3e-4, clip = 1.0 },
  -- the outer step on the merged outer gradient (DiLoCo's Nesterov 0.7 / 0.9)
  outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 },
  -- the preset fills every sync field this table leaves out (docs/algorithm.md §5; docs/recipes.md):
  -- decoupled is H = 24, 4 fragments (one leaves every 6 steps), tau = 2 (a merged fragment
  -- is applied 2 steps after its contribution left), quorum 1, adaptive grace,
  -- tokens^2/steps weights, RDA, alpha = 0.  --set sync.preset=diloco|streaming|dp switches.
  sync = {
    preset = "decoupled",
    codec = "f32",        -- outer gradients up: try "int4" or "e3m0" (docs/codecs.md)
  },
  -- four equal islands, each a virtual second per step, joined by 2.5 Gbps links
  islands = { count = 4, step_time = "1s", latency = "20ms", bandwidth = "2.5Gbps" },
  steps = 750,            -- per island at speed 1: 750 virtual seconds
  eval = { every = 125, batches = 32 },
}
