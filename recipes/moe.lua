-- moe: the charlm GPT with mixture-of-experts feed-forward layers: 4 experts of the
-- dense model's MLP size, top-1 routing, so active parameters per token equal the
-- dense model's (plus the router).  Compare with recipes/charlm.lua.
local diloco = require "diloco"

return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true,
    moe = { experts = 4, top_k = 1, aux_weight = 0.01 } },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%", ctx = 64, batch = 16 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, schedule = "cosine", min_lr = 3e-4,
    clip = 1.0 },
  steps = 3000,
  eval = { every = 250, batches = 32 },
}
